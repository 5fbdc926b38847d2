//! The engine client: connecting, negotiating the API version, and what its errors mean to
//! the service.

use bollard::Docker;

use crate::sandbox::SandboxError;

/// A client for the engine named by `host` (or the local defaults); no request is made yet.
pub(super) fn client(host: Option<&str>) -> Result<Docker, SandboxError> {
    match host {
        Some(h) => Docker::connect_with_host(h),
        None => Docker::connect_with_local_defaults(),
    }
    .map_err(classify)
}

/// Connects to the engine and negotiates the API version, so a newer client works with an older
/// engine (the version is shared by every clone of the client).
pub async fn connect(host: Option<&str>) -> Result<Docker, SandboxError> {
    client(host)?.negotiate_version().await.map_err(classify)
}

/// Engine errors as the service reports them.
pub(crate) fn classify(e: bollard::errors::Error) -> SandboxError {
    use bollard::errors::Error as E;
    match e {
        E::DockerResponseServerError {
            status_code: 404,
            message,
        } if message.contains("No such image") => {
            let image = message.rsplit(':').next().unwrap_or("").trim().to_string();
            SandboxError::ImageMissing(if image.is_empty() { message } else { image })
        }
        E::DockerResponseServerError {
            status_code,
            message,
        } => SandboxError::Engine(crate::sandbox::EngineFault::new(
            E::DockerResponseServerError {
                status_code,
                message,
            },
        )),
        E::IOError { .. }
        | E::HyperResponseError { .. }
        | E::HyperLegacyError { .. }
        | E::SocketNotFoundError(_)
        | E::RequestTimeoutError
        | E::HttpClientError { .. } => SandboxError::EngineUnavailable(e.to_string()),
        other => SandboxError::Engine(crate::sandbox::EngineFault::new(other)),
    }
}
