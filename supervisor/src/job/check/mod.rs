//! The checks anyone can make without running a job: the deployment's maxima, the job's own
//! constraints (paths, commands, environment), diffs that parse and stay inside the allowed
//! paths. A pure function of the job and the maxima: the service runs it before any container
//! exists, and the agent runs it again inside the container (fail closed on both sides).

use std::time::Duration;

use uuid::Uuid;

use super::Maxima;
use super::checked::{
    ArtifactPattern, CheckedAction, CheckedJob, CheckedStep, CommandCheck, Rejection,
};
use super::diff;
use super::env::{self, IMAGE_PATH};
use super::paths::{Allowed, JobPath, Root};
use super::types::{Action, Constraints, Job, JobError, RunCommand, Step};

/// Checks `job` against `maxima` and its own constraints, with the runner images' PATH.
pub fn check(job: Job, maxima: &Maxima) -> Result<CheckedJob, Rejection> {
    check_with(job, maxima, IMAGE_PATH)
}

/// [`check`] with the PATH of the image the job runs in (the agent passes its own).
pub fn check_with(job: Job, maxima: &Maxima, image_path: &str) -> Result<CheckedJob, Rejection> {
    let job_id = job.job_id.unwrap_or_else(Uuid::new_v4);
    let reject = |step: Option<usize>, error: JobError| Rejection {
        job_id,
        error,
        step,
        steps: job
            .steps
            .iter()
            .map(|s| (s.id.clone(), s.action.step_type()))
            .collect(),
        warnings: job.warnings.clone(),
    };
    let allowed = job_level(&job, maxima).map_err(|e| reject(None, e))?;
    let artifacts = job
        .artifacts
        .iter()
        .map(|p| artifact_pattern(p, &allowed))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| reject(None, e))?;
    let mut plans = Vec::with_capacity(job.steps.len());
    for (i, step) in job.steps.iter().enumerate() {
        let plan = step_plan(step, &job.constraints, &allowed, maxima, image_path)
            .map_err(|e| reject(Some(i), e))?;
        plans.push(plan);
    }
    Ok(CheckedJob {
        protocol_version: job.protocol_version,
        job_id,
        task_id: job.task_id,
        skill_id: job.skill_id,
        profile: job.profile,
        constraints: job.constraints,
        allowed,
        steps: job
            .steps
            .into_iter()
            .zip(plans)
            .map(|(step, plan)| CheckedStep { step, plan })
            .collect(),
        artifacts,
        warnings: job.warnings,
        maxima: maxima.clone(),
    })
}

fn above(what: &str, asked: impl std::fmt::Display, max: impl std::fmt::Display) -> JobError {
    JobError::limit(format!(
        "{what} {asked} is above this deployment's maximum of {max}"
    ))
}

fn job_level(job: &Job, maxima: &Maxima) -> Result<Allowed, JobError> {
    let c = &job.constraints;
    if c.network_allowed && !maxima.network_allowed {
        return Err(JobError::policy(
            "network_allowed: this deployment runs jobs without a network",
        ));
    }
    if job.steps.len() > maxima.max_steps {
        return Err(above(
            "a job of",
            format!("{} steps", job.steps.len()),
            maxima.max_steps,
        ));
    }
    if c.max_runtime_seconds > maxima.max_runtime_seconds {
        return Err(above(
            "max_runtime_seconds",
            c.max_runtime_seconds,
            maxima.max_runtime_seconds,
        ));
    }
    if c.max_output_bytes > maxima.max_output_bytes {
        return Err(above(
            "max_output_bytes",
            c.max_output_bytes,
            maxima.max_output_bytes,
        ));
    }
    let size = job_size(job);
    if size > maxima.max_job_bytes {
        return Err(above(
            "a job of",
            format!("{size} bytes"),
            maxima.max_job_bytes,
        ));
    }
    if job.artifacts.len() > maxima.max_artifacts {
        return Err(above(
            "artifacts: a list of",
            job.artifacts.len(),
            maxima.max_artifacts,
        ));
    }
    if let Some(bad) = c.allowed_commands.iter().find(|n| !bare_name(n)) {
        return Err(JobError::policy(format!(
            "allowed_commands: `{}` is not a bare program name",
            bad.escape_debug()
        )));
    }
    Allowed::new(&c.allowed_paths).map_err(JobError::policy)
}

/// The job's size as JSON (counted, not buffered).
fn job_size(job: &Job) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, job) {
        Ok(()) => count.0,
        Err(_) => u64::MAX,
    }
}

fn bare_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

fn step_plan(
    step: &Step,
    constraints: &Constraints,
    allowed: &Allowed,
    maxima: &Maxima,
    image_path: &str,
) -> Result<CheckedAction, JobError> {
    let path = |p: &str| allowed.check(p).map_err(JobError::policy);
    match &step.action {
        Action::RunCommand(c) => command_plan(c, constraints, allowed, maxima, image_path),
        Action::WriteFile(w) => {
            if w.decoded_len() > maxima.max_write_bytes {
                return Err(above(
                    "write_file content of",
                    format!("{} bytes", w.decoded_len()),
                    maxima.max_write_bytes,
                ));
            }
            Ok(CheckedAction::WriteFile {
                path: path(&w.path)?,
            })
        }
        Action::ReadFile(r) => {
            if r.max_bytes > maxima.max_read_bytes {
                return Err(above(
                    "read_file max_bytes",
                    r.max_bytes,
                    maxima.max_read_bytes,
                ));
            }
            Ok(CheckedAction::ReadFile {
                path: path(&r.path)?,
            })
        }
        Action::ApplyUnifiedDiff(d) => {
            if d.diff.len() as u64 > maxima.max_diff_bytes {
                return Err(above(
                    "a diff of",
                    format!("{} bytes", d.diff.len()),
                    maxima.max_diff_bytes,
                ));
            }
            let patch =
                diff::parse(&d.diff).map_err(|e| JobError::new(e.error_type(), e.to_string()))?;
            let files = patch
                .files
                .into_iter()
                .map(|f| Ok((path(&f.path)?, f)))
                .collect::<Result<Vec<_>, JobError>>()?;
            Ok(CheckedAction::ApplyUnifiedDiff { files })
        }
        Action::ListTree(l) => {
            if l.max_depth > maxima.max_list_depth {
                return Err(above(
                    "list_tree max_depth",
                    l.max_depth,
                    maxima.max_list_depth,
                ));
            }
            let max_entries = l.max_entries.unwrap_or(maxima.max_list_entries);
            if max_entries > maxima.max_list_entries {
                return Err(above(
                    "list_tree max_entries",
                    max_entries,
                    maxima.max_list_entries,
                ));
            }
            Ok(CheckedAction::ListTree {
                path: path(&l.path)?,
                max_entries,
            })
        }
    }
}

fn command_plan(
    c: &RunCommand,
    constraints: &Constraints,
    allowed: &Allowed,
    maxima: &Maxima,
    image_path: &str,
) -> Result<CheckedAction, JobError> {
    let command = command_check(&c.command, &constraints.allowed_commands, image_path)?;
    let working_dir = match &c.working_dir {
        Some(dir) => allowed
            .check(dir)
            .map_err(|e| JobError::policy(format!("working_dir: {e}")))?,
        None => allowed
            .first()
            .cloned()
            .ok_or_else(|| JobError::policy("no allowed_paths for the working directory"))?,
    };
    if let Some(why) = c
        .env
        .iter()
        .find_map(|(name, value)| env::refusal(name, value, image_path))
    {
        return Err(JobError::policy(why));
    }
    let stdin = c.stdin.as_ref().map_or(0, |s| s.len() as u64);
    if stdin > maxima.max_stdin_bytes {
        return Err(above(
            "stdin of",
            format!("{stdin} bytes"),
            maxima.max_stdin_bytes,
        ));
    }
    Ok(CheckedAction::RunCommand {
        command,
        working_dir,
        timeout: c.timeout_seconds.map(Duration::from_secs),
    })
}

/// `command` resolved by name: a bare name in `allowed`, or an absolute path to one in the
/// image's PATH directories (`./python3`, `../../bin/sh` and anything in the workspace never).
pub fn command_check(
    command: &str,
    allowed: &[String],
    image_path: &str,
) -> Result<CommandCheck, JobError> {
    let refuse = |why: String| Err(JobError::policy(why));
    let checked = match command.rsplit_once('/') {
        None => CommandCheck::Name(command.to_string()),
        Some((dir, name)) => {
            let canonical = dir.starts_with('/')
                && dir[1..]
                    .split('/')
                    .all(|p| !p.is_empty() && p != "." && p != "..")
                && bare_name(name);
            let in_path = image_path.split(':').any(|d| d == dir);
            if !canonical || !in_path {
                return refuse(format!(
                    "command `{}` is neither a bare name nor a program in the image's PATH directories ({image_path})",
                    command.escape_debug()
                ));
            }
            CommandCheck::Path {
                dir: dir.to_string(),
                name: name.to_string(),
            }
        }
    };
    if !allowed.iter().any(|a| a == checked.name()) {
        return refuse(format!(
            "command `{}` is not in allowed_commands ({})",
            checked.name().escape_debug(),
            if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.join(", ")
            }
        ));
    }
    Ok(checked)
}

fn has_magic(component: &str) -> bool {
    component.contains(['*', '?', '['])
}

/// An artifact pattern is canonical, and its literal part lies inside an allowed path (so no
/// wildcard can match anything outside one).
fn artifact_pattern(text: &str, allowed: &Allowed) -> Result<ArtifactPattern, JobError> {
    let refuse = |why: &str| Err(JobError::policy(format!("artifacts: `{text}` {why}")));
    let absolute = if text.starts_with('/') {
        text.to_string()
    } else {
        format!("{}/{text}", Root::Workspace.path())
    };
    let parts: Vec<&str> = absolute[1..].split('/').collect();
    let literal = parts.iter().take_while(|p| !has_magic(p)).count();
    if literal == 0 {
        return refuse("must start with /workspace or /tmp");
    }
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return refuse("is not canonical (empty, `.` or `..` components)");
    }
    let prefix =
        JobPath::parse(&format!("/{}", parts[..literal].join("/"))).map_err(JobError::policy)?;
    // The literal part lies in an allowed path, so whatever the wildcards match does too.
    if !allowed.contains(&prefix) {
        return refuse("is outside allowed_paths");
    }
    Ok(ArtifactPattern {
        text: text.to_string(),
        root: prefix.root(),
        components: parts[1..].iter().map(|p| p.to_string()).collect(),
    })
}

#[cfg(test)]
mod tests;
