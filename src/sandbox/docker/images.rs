//! Runner images, built without a registry.
//!
//! 1. A base image from Debian packages: `mmdebstrap` writes a rootfs tarball (python3 with its full
//!    standard library, bash, jq, gawk, bc, procps; no docs or locales), which is imported.
//! 2. The runner image: `images/offline/Dockerfile` on that base adds the supervisor.
//!
//! Both tags carry a hash of what went into them, so a second build with nothing changed only
//! checks that the images exist; each is also tagged `latest`, so other Dockerfiles can name the
//! base without knowing the hash (`images/service/Dockerfile`, the service image of
//! `docker-compose.yml`). `images/registry/` has Dockerfiles for people with a registry.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use bollard::Docker;
use bollard::query_parameters::{BuildImageOptions, CreateImageOptions, TagImageOptions};
use futures::StreamExt;
use sha2::{Digest, Sha256};

use super::classify;
use crate::sandbox::SandboxError;

/// The image runs use unless configured otherwise.
pub const DEFAULT_IMAGE: &str = "scriptgate-runner:latest";
/// The current base image under a stable name (`FROM` of `images/service/Dockerfile`).
pub const BASE_IMAGE: &str = "scriptgate-base:latest";
const RUNNER_REPO: &str = "scriptgate-runner";
const BASE_REPO: &str = "scriptgate-base";
const SUITE: &str = "bookworm";
const PACKAGES: &[&str] = &["python3", "bash", "jq", "gawk", "bc", "procps"];
const EXCLUDES: &[&str] = &[
    "path-exclude=/usr/share/doc/*",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
];
const DOCKERFILE: &str = include_str!("../../../images/offline/Dockerfile");

#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The supervisor binary to put in the image.
    pub supervisor: PathBuf,
    /// Rebuild even when current.
    pub force: bool,
    /// Debian mirror for mmdebstrap (default: its own choice, usually deb.debian.org).
    pub mirror: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(transparent)]
    Engine(#[from] SandboxError),
    #[error("{0}")]
    Build(String),
}

fn hash(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())[..12].to_string()
}

/// The supervisor next to the running executable (how `cargo build` and the release layout place it).
pub fn default_supervisor() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let candidate = exe.with_file_name("scriptgate-supervisor");
    candidate.is_file().then_some(candidate)
}

/// Builds (or confirms) the base and runner images; returns the runner image tag.
pub async fn build(
    docker: &Docker,
    options: &BuildOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<String, ImageError> {
    let base = ensure_base(docker, options, progress).await?;
    tag_latest(docker, &base, BASE_REPO).await?;
    progress(&format!("tagged {base} as {BASE_IMAGE}"));
    ensure_runner(docker, &base, options, progress).await
}

/// Tags `image` as `<repo>:latest`.
async fn tag_latest(docker: &Docker, image: &str, repo: &str) -> Result<(), ImageError> {
    docker
        .tag_image(
            image,
            Some(TagImageOptions {
                repo: Some(repo.into()),
                tag: Some("latest".into()),
            }),
        )
        .await
        .map_err(classify)?;
    Ok(())
}

async fn exists(docker: &Docker, image: &str) -> Result<Option<String>, ImageError> {
    match docker.inspect_image(image).await {
        Ok(i) => Ok(i.id),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(None),
        Err(e) => Err(classify(e).into()),
    }
}

async fn ensure_base(
    docker: &Docker,
    options: &BuildOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<String, ImageError> {
    let recipe = format!("{SUITE} {} {}", PACKAGES.join(","), EXCLUDES.join(","));
    let tag = format!("{SUITE}-{}", hash(&[recipe.as_bytes()]));
    let image = format!("{BASE_REPO}:{tag}");
    if !options.force && exists(docker, &image).await?.is_some() {
        progress(&format!("base image {image} is current"));
        return Ok(image);
    }
    let dir =
        tempfile::tempdir().map_err(|e| ImageError::Build(format!("temporary directory: {e}")))?;
    let rootfs = dir.path().join("rootfs.tar");
    progress(&format!(
        "building a {SUITE} rootfs with mmdebstrap ({})",
        PACKAGES.join(", ")
    ));
    run_mmdebstrap(&rootfs, options.mirror.as_deref()).await?;
    progress(&format!("importing it as {image}"));
    let file = tokio::fs::File::open(&rootfs)
        .await
        .map_err(|e| ImageError::Build(format!("{}: {e}", rootfs.display())))?;
    let body = bollard::body_try_stream(tokio_util::io::ReaderStream::new(file));
    let mut import = docker.create_image(
        Some(CreateImageOptions {
            from_src: Some("-".into()),
            repo: Some(BASE_REPO.into()),
            tag: Some(tag),
            changes: vec!["ENV LANG=C.UTF-8".into()],
            ..Default::default()
        }),
        Some(body),
        None,
    );
    while let Some(info) = import.next().await {
        let info = info.map_err(classify)?;
        if let Some(detail) = info.error_detail {
            return Err(ImageError::Build(format!(
                "import failed: {}",
                detail.message.unwrap_or_default()
            )));
        }
    }
    Ok(image)
}

async fn run_mmdebstrap(rootfs: &Path, mirror: Option<&str>) -> Result<(), ImageError> {
    let mut command = tokio::process::Command::new("mmdebstrap");
    command
        .arg("--variant=essential")
        .arg(format!("--include={}", PACKAGES.join(",")))
        .arg("--quiet");
    for exclude in EXCLUDES {
        command.arg(format!("--dpkgopt={exclude}"));
    }
    command.arg(SUITE).arg(rootfs);
    if let Some(m) = mirror {
        command.arg(m);
    }
    let status = command.status().await.map_err(|e| {
        ImageError::Build(if e.kind() == std::io::ErrorKind::NotFound {
            "mmdebstrap is not installed (Debian: apt-get install mmdebstrap)".to_string()
        } else {
            format!("mmdebstrap: {e}")
        })
    })?;
    if !status.success() {
        return Err(ImageError::Build(format!("mmdebstrap failed ({status})")));
    }
    Ok(())
}

async fn ensure_runner(
    docker: &Docker,
    base: &str,
    options: &BuildOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<String, ImageError> {
    let supervisor = std::fs::read(&options.supervisor).map_err(|e| {
        ImageError::Build(format!(
            "supervisor binary {}: {e} (build it with `cargo build --release --workspace`)",
            options.supervisor.display()
        ))
    })?;
    let base_id = exists(docker, base).await?.unwrap_or_default();
    let tag = hash(&[DOCKERFILE.as_bytes(), &supervisor, base_id.as_bytes()]);
    let image = format!("{RUNNER_REPO}:{tag}");
    if options.force || exists(docker, &image).await?.is_none() {
        progress(&format!("building {image}"));
        let context = context_tar(&supervisor)
            .map_err(|e| ImageError::Build(format!("build context: {e}")))?;
        let mut build = docker.build_image(
            BuildImageOptions {
                dockerfile: "Dockerfile".into(),
                t: Some(image.clone()),
                buildargs: Some(HashMap::from([("BASE".to_string(), base.to_string())])),
                rm: true,
                forcerm: true,
                labels: Some(HashMap::from([(
                    "scriptgate.supervisor".to_string(),
                    tag.clone(),
                )])),
                ..Default::default()
            },
            None,
            Some(bollard::body_full(context.into())),
        );
        while let Some(info) = build.next().await {
            let info = info.map_err(classify)?;
            if let Some(detail) = info.error_detail {
                return Err(ImageError::Build(format!(
                    "build failed: {}",
                    detail.message.unwrap_or_default()
                )));
            }
        }
    } else {
        progress(&format!("runner image {image} is current"));
    }
    tag_latest(docker, &image, RUNNER_REPO).await?;
    progress(&format!("tagged {image} as {DEFAULT_IMAGE}"));
    Ok(DEFAULT_IMAGE.to_string())
}

fn context_tar(supervisor: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8], mode: u32| {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_cksum();
        builder.append_data(&mut header, name, data)
    };
    add("Dockerfile", DOCKERFILE.as_bytes(), 0o644)?;
    add("scriptgate-supervisor", supervisor, 0o755)?;
    let mut out = builder.into_inner()?;
    out.flush()?;
    Ok(out)
}
