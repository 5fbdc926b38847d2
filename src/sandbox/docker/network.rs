//! Network access of Docker sandboxes: every container of a service that runs an egress proxy
//! gets a directory of its own mounted read-only at
//! [`CONTAINER_SOCKET_DIR`](crate::sandbox::egress::CONTAINER_SOCKET_DIR), warm ones included,
//! and the proxy puts a socket there only when the run asks for network access.
//!
//! Why every container and not only those of runs that opt in: the warm pool starts containers
//! before any request, so whether a run will ask for network access is not known when its
//! container starts, and mounting later is impossible (the engine fixes binds at create). With
//! the directory mounted in all of them, runs with network access stay warm, and a run without
//! it has an empty directory: the forwarder answers every client with a 502 and the container's
//! only interface is still loopback. The directory costs a bind mount per container (5–8 ms of
//! start-up, paid before the request for warm containers).

use super::session::Prepared;
use crate::sandbox::egress::{EgressDir, EgressProxy, SandboxEgress, SandboxOptions};
use crate::sandbox::{NetworkAccess, SandboxError};
use scriptgate_supervisor::forward::FEATURE_EGRESS;

/// The service's egress proxy as the sandbox uses it.
#[derive(Debug, Clone)]
pub(crate) struct Egress {
    proxy: EgressProxy,
    /// Why no run may have network access in this deployment (a runtime that cannot reach a
    /// host socket), or `None`.
    refusal: Option<String>,
}

/// Runtimes known to let a container connect to a host Unix socket through a bind mount.
fn reaches_host_sockets(runtime: Option<&str>) -> bool {
    matches!(runtime, None | Some("runc") | Some("io.containerd.runc.v2"))
}

impl Egress {
    /// `runtime` is `sandbox.runtime`; `host_uds` says an operator set that runtime up to connect
    /// to host sockets (gVisor: `runsc --host-uds=open`).
    pub(crate) fn new(proxy: EgressProxy, runtime: Option<&str>, host_uds: bool) -> Egress {
        let refusal = (!reaches_host_sockets(runtime) && !host_uds).then(|| {
            format!(
                "the sandbox runtime `{}` cannot connect to the egress proxy's socket unless it \
                 allows host Unix sockets (gVisor: `runsc --host-uds=open`); once it does, set \
                 egress.runtime_allows_host_sockets = true",
                runtime.unwrap_or_default()
            )
        });
        Egress { proxy, refusal }
    }

    /// A directory to mount in a new container (`None`: this deployment gives no run network
    /// access, so nothing is mounted).
    pub(crate) async fn reserve(&self) -> Result<Option<EgressDir>, SandboxError> {
        if self.refusal.is_some() {
            return Ok(None);
        }
        self.proxy
            .reserve()
            .await
            .map(Some)
            .map_err(|e| SandboxError::StartFailed(e.to_string()))
    }

    /// Opens the run's socket in its container's directory and checks that the proxy answers
    /// on it before anything runs.
    pub(crate) async fn open(
        &self,
        prepared: &mut Prepared,
        access: NetworkAccess,
    ) -> Result<SandboxEgress, SandboxError> {
        if let Some(refusal) = &self.refusal {
            return Err(SandboxError::NetworkUnavailable(refusal.clone()));
        }
        if !prepared.features.iter().any(|f| f == FEATURE_EGRESS) {
            return Err(SandboxError::NetworkUnavailable(
                "the runner image's supervisor has no egress forwarder: rebuild the images with \
                 `scriptgate images build`"
                    .into(),
            ));
        }
        let Some(dir) = prepared.egress_dir.take() else {
            return Err(SandboxError::NetworkUnavailable(
                "this container was started without an egress directory".into(),
            ));
        };
        let options = SandboxOptions {
            id: prepared.execution_id.to_string(),
            policy: access.policy,
            limits: access.limits,
            approver: access.approver,
        };
        let unavailable = |e: crate::sandbox::egress::EgressError| {
            SandboxError::NetworkUnavailable(e.to_string())
        };
        let egress = self
            .proxy
            .open_in(dir, options)
            .await
            .map_err(unavailable)?;
        egress.check().await.map_err(unavailable)?;
        Ok(egress)
    }
}

/// The address ranges of the engine's networks (bridges and user-defined ones), for the proxy to
/// deny; empty when the engine does not answer.
pub(crate) async fn engine_networks(docker: &bollard::Docker) -> Vec<ipnet::IpNet> {
    let Ok(networks) = docker
        .list_networks(None::<bollard::query_parameters::ListNetworksOptions>)
        .await
    else {
        return Vec::new();
    };
    networks
        .iter()
        .filter_map(|n| n.ipam.as_ref()?.config.as_ref())
        .flatten()
        .filter_map(|c| c.subnet.as_deref()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_that_cannot_reach_host_sockets_are_refused_unless_configured() {
        assert!(reaches_host_sockets(None));
        assert!(reaches_host_sockets(Some("runc")));
        assert!(!reaches_host_sockets(Some("runsc")));
    }

    #[tokio::test]
    async fn under_gvisor_nothing_is_mounted_until_the_runtime_allows_host_sockets() {
        let dir = tempfile::tempdir().expect("dir");
        let settings = crate::sandbox::egress::EgressSettings::default();
        let proxy = EgressProxy::start(&settings, dir.path())
            .await
            .expect("proxy");
        let refused = Egress::new(proxy.clone(), Some("runsc"), false);
        assert!(refused.reserve().await.expect("no error").is_none());
        let reason = refused.refusal.as_deref().expect("a refusal");
        assert!(reason.contains("--host-uds=open"), "{reason}");
        let allowed = Egress::new(proxy.clone(), Some("runsc"), true);
        let reserved = allowed
            .reserve()
            .await
            .expect("reserve")
            .expect("a directory");
        assert!(reserved.path().is_dir());
        let runc = Egress::new(proxy.clone(), None, false);
        assert!(runc.refusal.is_none());
        drop(reserved);
        proxy.shutdown().await;
    }
}
