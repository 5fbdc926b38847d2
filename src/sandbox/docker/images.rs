//! Runner images, built without a registry.
//!
//! 1. A base image from Debian packages: `mmdebstrap` writes a rootfs tarball (python3 with its full
//!    standard library, bash, jq, gawk, bc, procps; no docs or locales), which is imported.
//! 2. The runner image: `images/offline/Dockerfile` on that base adds the supervisor.
//!
//! 3. The `data` profile: the same two steps with the scientific Python stack (`DATA_PACKAGES`) and
//!    `images/offline/data.Dockerfile`, tagged `scriptgate-runner-data`.
//!
//! After a runner image is built, `images/profile/info.py` runs once in it (no network) and what it
//! prints (Python and package versions) becomes the image's `scriptgate.profile.info` label, which
//! `GET /v1/profiles` reports: recorded at build time, never guessed.
//!
//! Both tags carry a hash of what went into them, so a second build with nothing changed only
//! checks that the images exist; each is also tagged `latest`, so other Dockerfiles can name the
//! base without knowing the hash (`images/service/Dockerfile`, the service image of
//! `docker-compose.yml`). `images/registry/` has Dockerfiles for people with a registry.
//!
//! One file (past 500 lines): the build reads top to bottom as one sequence, base → runner →
//! recorded profile information; no part of it is used on its own.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    BuildImageOptions, CreateContainerOptions, CreateImageOptions, LogsOptions,
    RemoveContainerOptions, RemoveImageOptions, StartContainerOptions, TagImageOptions,
    WaitContainerOptions,
};
use futures::StreamExt;
use sha2::{Digest, Sha256};

use super::classify;
use crate::sandbox::SandboxError;

/// The image runs use unless configured otherwise.
pub const DEFAULT_IMAGE: &str = "scriptgate-runner:latest";
/// The current base image under a stable name (`FROM` of `images/service/Dockerfile`).
pub const BASE_IMAGE: &str = "scriptgate-base:latest";
/// The `data` profile's image.
pub const DATA_IMAGE: &str = "scriptgate-runner-data:latest";
/// The label holding what `images/profile/info.py` printed when the image was built.
pub const INFO_LABEL: &str = "scriptgate.profile.info";
const SUITE: &str = "bookworm";
const PACKAGES: &[&str] = &["python3", "bash", "jq", "gawk", "bc", "procps"];
/// The `data` profile's packages, on top of `PACKAGES`.
pub const DATA_PACKAGES: &[&str] = &[
    "python3-numpy",
    "python3-pandas",
    "python3-scipy",
    "python3-matplotlib",
    "python3-sklearn",
    "python3-statsmodels",
    "python3-sympy",
    "python3-networkx",
    "python3-pil",
    "python3-requests",
    "python3-bs4",
    "python3-lxml",
    "python3-openpyxl",
    "python3-yaml",
    "python3-tabulate",
    "sqlite3",
    "fonts-dejavu-core",
    // A proxy-aware command-line client for runs with network access (through the egress proxy).
    "curl",
    "ca-certificates",
];
const EXCLUDES: &[&str] = &[
    "path-exclude=/usr/share/doc/*",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
];
const DOCKERFILE: &str = include_str!("../../../images/offline/Dockerfile");
const DATA_DOCKERFILE: &str = include_str!("../../../images/offline/data.Dockerfile");
const PLOT_HOOK: &str = include_str!("../../../images/profile/scriptgate_plots.py");
const INFO_SCRIPT: &str = include_str!("../../../images/profile/info.py");

/// How one built-in profile's image is made.
#[derive(Debug, Clone, Copy)]
struct Recipe {
    profile: &'static str,
    base_repo: &'static str,
    runner_repo: &'static str,
    extra_packages: &'static [&'static str],
    dockerfile: &'static str,
    /// Extra files of the build context (name, contents).
    files: &'static [(&'static str, &'static str)],
}

const RECIPES: [Recipe; 2] = [
    Recipe {
        profile: "minimal",
        base_repo: "scriptgate-base",
        runner_repo: "scriptgate-runner",
        extra_packages: &[],
        dockerfile: DOCKERFILE,
        files: &[],
    },
    Recipe {
        profile: "data",
        base_repo: "scriptgate-base-data",
        runner_repo: "scriptgate-runner-data",
        extra_packages: DATA_PACKAGES,
        dockerfile: DATA_DOCKERFILE,
        files: &[("scriptgate_plots.py", PLOT_HOOK)],
    },
];

impl Recipe {
    fn packages(&self) -> Vec<&'static str> {
        PACKAGES
            .iter()
            .chain(self.extra_packages)
            .copied()
            .collect()
    }
}

/// The built-in profiles `scriptgate images build --profile` knows.
pub fn buildable_profiles() -> Vec<&'static str> {
    RECIPES.iter().map(|r| r.profile).collect()
}

#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The supervisor binary to put in the image.
    pub supervisor: PathBuf,
    /// Rebuild even when current.
    pub force: bool,
    /// Debian mirror for mmdebstrap (default: its own choice, usually deb.debian.org).
    pub mirror: Option<String>,
    /// Build only this built-in profile's image (default: all of them).
    pub profile: Option<String>,
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

/// Builds (or confirms) the base and runner images of every built-in profile (or of
/// `options.profile`); returns the runner image tags.
pub async fn build(
    docker: &Docker,
    options: &BuildOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<String>, ImageError> {
    if let Ok(binary) = std::fs::read(&options.supervisor) {
        progress(&format!(
            "supervisor {}: {:.1} MB, {}",
            options.supervisor.display(),
            binary.len() as f64 / 1e6,
            if is_static_elf(&binary) {
                "statically linked"
            } else {
                "dynamically linked (it needs the image's glibc; `scripts/prepare.sh` links it statically)"
            }
        ));
    }
    let recipes: Vec<&Recipe> = match &options.profile {
        None => RECIPES.iter().collect(),
        Some(name) => vec![RECIPES.iter().find(|r| r.profile == name).ok_or_else(|| {
            ImageError::Build(format!(
                "no built-in profile `{name}` (known: {})",
                buildable_profiles().join(", ")
            ))
        })?],
    };
    let mut built = Vec::new();
    for recipe in recipes {
        let started = std::time::Instant::now();
        let base = ensure_base(docker, recipe, options, progress).await?;
        tag_latest(docker, &base, recipe.base_repo).await?;
        progress(&format!("tagged {base} as {}:latest", recipe.base_repo));
        let image = ensure_runner(docker, &base, recipe, options, progress).await?;
        let size = docker
            .inspect_image(&image)
            .await
            .map_err(classify)?
            .size
            .unwrap_or(0);
        progress(&format!(
            "profile {}: {image} ready in {:.1}s, {:.0} MB",
            recipe.profile,
            started.elapsed().as_secs_f64(),
            size as f64 / 1e6
        ));
        built.push(image);
    }
    Ok(built)
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
    recipe: &Recipe,
    options: &BuildOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<String, ImageError> {
    let packages = recipe.packages();
    let key = format!("{SUITE} {} {}", packages.join(","), EXCLUDES.join(","));
    let tag = format!("{SUITE}-{}", hash(&[key.as_bytes()]));
    let image = format!("{}:{tag}", recipe.base_repo);
    if !options.force && exists(docker, &image).await?.is_some() {
        progress(&format!("base image {image} is current"));
        return Ok(image);
    }
    let dir =
        tempfile::tempdir().map_err(|e| ImageError::Build(format!("temporary directory: {e}")))?;
    let rootfs = dir.path().join("rootfs.tar");
    progress(&format!(
        "building a {SUITE} rootfs with mmdebstrap ({})",
        packages.join(", ")
    ));
    run_mmdebstrap(&rootfs, &packages, options.mirror.as_deref()).await?;
    progress(&format!("importing it as {image}"));
    let file = tokio::fs::File::open(&rootfs)
        .await
        .map_err(|e| ImageError::Build(format!("{}: {e}", rootfs.display())))?;
    let body = bollard::body_try_stream(tokio_util::io::ReaderStream::new(file));
    let mut import = docker.create_image(
        Some(CreateImageOptions {
            from_src: Some("-".into()),
            repo: Some(recipe.base_repo.into()),
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

async fn run_mmdebstrap(
    rootfs: &Path,
    packages: &[&str],
    mirror: Option<&str>,
) -> Result<(), ImageError> {
    let mut command = tokio::process::Command::new("mmdebstrap");
    command
        .arg("--variant=essential")
        .arg(format!("--include={}", packages.join(",")))
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
    recipe: &Recipe,
    options: &BuildOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<String, ImageError> {
    let supervisor = std::fs::read(&options.supervisor).map_err(|e| {
        ImageError::Build(format!(
            "supervisor binary {}: {e} (build it with `scripts/prepare.sh --release`)",
            options.supervisor.display()
        ))
    })?;
    let base_id = exists(docker, base).await?.unwrap_or_default();
    let mut parts: Vec<&[u8]> = vec![
        recipe.dockerfile.as_bytes(),
        &supervisor,
        base_id.as_bytes(),
    ];
    for (name, data) in recipe.files {
        parts.extend([name.as_bytes(), data.as_bytes()]);
    }
    parts.push(INFO_SCRIPT.as_bytes());
    let tag = hash(&parts);
    let image = format!("{}:{tag}", recipe.runner_repo);
    if options.force || exists(docker, &image).await?.is_none() {
        progress(&format!("building {image}"));
        let staged = format!("{}:{tag}-staged", recipe.runner_repo);
        let mut files = vec![("Dockerfile", recipe.dockerfile.as_bytes())];
        files.extend(recipe.files.iter().map(|(n, d)| (*n, d.as_bytes())));
        let context = context_tar(&files, &supervisor)
            .map_err(|e| ImageError::Build(format!("build context: {e}")))?;
        let labels = HashMap::from([
            ("scriptgate.supervisor".to_string(), tag.clone()),
            ("scriptgate.profile".to_string(), recipe.profile.to_string()),
        ]);
        let args = HashMap::from([("BASE".to_string(), base.to_string())]);
        docker_build(docker, &staged, context, args, labels.clone()).await?;
        progress(&format!("recording what {staged} holds"));
        let info = profile_info(docker, &staged).await?;
        let mut labels = labels;
        labels.insert(INFO_LABEL.to_string(), info);
        let context = context_tar(&[("Dockerfile", b"ARG IMAGE\nFROM ${IMAGE}\n")], &[])
            .map_err(|e| ImageError::Build(format!("build context: {e}")))?;
        let args = HashMap::from([("IMAGE".to_string(), staged.clone())]);
        docker_build(docker, &image, context, args, labels).await?;
        let _ = docker
            .remove_image(&staged, None::<RemoveImageOptions>, None)
            .await;
    } else {
        progress(&format!("runner image {image} is current"));
    }
    tag_latest(docker, &image, recipe.runner_repo).await?;
    let latest = format!("{}:latest", recipe.runner_repo);
    progress(&format!("tagged {image} as {latest}"));
    Ok(latest)
}

async fn docker_build(
    docker: &Docker,
    tag: &str,
    context: Vec<u8>,
    buildargs: HashMap<String, String>,
    labels: HashMap<String, String>,
) -> Result<(), ImageError> {
    let mut build = docker.build_image(
        BuildImageOptions {
            dockerfile: "Dockerfile".into(),
            t: Some(tag.to_string()),
            buildargs: Some(buildargs),
            rm: true,
            forcerm: true,
            labels: Some(labels),
            ..Default::default()
        },
        None,
        Some(bollard::body_full(context.into())),
    );
    while let Some(info) = build.next().await {
        let info = info.map_err(classify)?;
        if let Some(detail) = info.error_detail {
            return Err(ImageError::Build(format!(
                "build of {tag} failed: {}",
                detail.message.unwrap_or_default()
            )));
        }
    }
    Ok(())
}

/// Runs `images/profile/info.py` once in `image` (no network, read-only, unprivileged) and returns
/// the JSON it printed.
async fn profile_info(docker: &Docker, image: &str) -> Result<String, ImageError> {
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint: Some(vec!["python3".into(), "-c".into(), INFO_SCRIPT.into()]),
        cmd: Some(vec![]),
        user: Some("65534:65534".into()),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            tmpfs: Some(HashMap::from([(
                "/tmp".to_string(),
                "size=16m".to_string(),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = docker
        .create_container(None::<CreateContainerOptions>, body)
        .await
        .map_err(classify)?;
    let result = collect_info(docker, &created.id).await;
    let _ = docker
        .remove_container(
            &created.id,
            Some(RemoveContainerOptions {
                force: true,
                v: true,
                link: false,
            }),
        )
        .await;
    result
}

async fn collect_info(docker: &Docker, id: &str) -> Result<String, ImageError> {
    docker
        .start_container(id, None::<StartContainerOptions>)
        .await
        .map_err(classify)?;
    let mut wait = docker.wait_container(id, None::<WaitContainerOptions>);
    while let Some(w) = wait.next().await {
        if let Err(e) = w {
            return Err(ImageError::Build(format!("profile info: {e}")));
        }
    }
    let mut logs = docker.logs(
        id,
        Some(LogsOptions {
            stdout: true,
            stderr: true,
            ..Default::default()
        }),
    );
    let (mut out, mut err) = (String::new(), String::new());
    while let Some(chunk) = logs.next().await {
        match chunk.map_err(classify)? {
            LogOutput::StdOut { message } => out.push_str(&String::from_utf8_lossy(&message)),
            other => err.push_str(&other.to_string()),
        }
    }
    let line = out.trim();
    serde_json::from_str::<serde_json::Value>(line)
        .map_err(|e| ImageError::Build(format!("profile info is not JSON ({e}): {line} {err}")))?;
    Ok(line.to_string())
}

/// Whether `binary` is a 64-bit little-endian ELF executable without a program interpreter (no
/// dynamic loader: statically linked).
fn is_static_elf(binary: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let u16_at = |at: usize| {
        binary
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        binary
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |at: usize| {
        binary
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
    };
    if binary.get(..6) != Some(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(size), Some(count)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else {
        return false;
    };
    let phoff = usize::try_from(phoff).unwrap_or(usize::MAX);
    (0..usize::from(count)).all(|i| {
        let at = phoff.saturating_add(i * usize::from(size));
        u32_at(at).is_some_and(|t| t != PT_INTERP)
    })
}

fn context_tar(files: &[(&str, &[u8])], supervisor: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8], mode: u32| {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_cksum();
        builder.append_data(&mut header, name, data)
    };
    for (name, data) in files {
        add(name, data, 0o644)?;
    }
    if !supervisor.is_empty() {
        add("scriptgate-supervisor", supervisor, 0o755)?;
    }
    let mut out = builder.into_inner()?;
    out.flush()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_interpreter_marks_a_dynamic_binary() {
        // This test binary is linked dynamically.
        let exe = std::fs::read(std::env::current_exe().expect("exe")).expect("read");
        assert!(!is_static_elf(&exe));
        // A minimal ELF64 header with one PT_LOAD program header and no PT_INTERP.
        let mut elf = vec![0u8; 0x40 + 0x38];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        elf[0x40..0x44].copy_from_slice(&1u32.to_le_bytes());
        assert!(is_static_elf(&elf));
        elf[0x40..0x44].copy_from_slice(&3u32.to_le_bytes());
        assert!(!is_static_elf(&elf));
        assert!(!is_static_elf(b"#!/bin/sh"));
    }
}
