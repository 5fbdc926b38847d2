//! `execve` and `execveat`: decided on the program the supervisor finds (symlinks resolved) and
//! the arguments it reads, against `command_rules` and the `exec` file rules; the stricter wins.
//! A command line an operator approved before the run lifts only the `command_rules` hold on
//! exactly that line (`approved`).
//!
//! An allowed exec must be continued (there is no way to execute on the process's behalf), so the
//! kernel reads the path and the arguments again: a thread of the process that rewrites them in
//! between runs something else. What bounds that is the exec floor (see `floor`): a Landlock
//! allow-list of the files any rule could let run, applied to the process before the script ran.

use scriptgate_policy::Operation;
use scriptgate_policy::events::OperationType;

use super::context::{Cx, Outcome};
use super::events::{self, Judgement};
use super::notify::Reply;
use super::resolve::{self, Lookup};

/// Arguments read for a decision at most (more is refused: the decision would not see them all).
const MAX_ARGS: usize = 16_384;
const MAX_ARG_BYTES: usize = 1 << 20;
/// Command lines kept for approval requests.
pub(crate) const RECENT: usize = 8;

/// `execve(path, argv, envp)` (`dirfd` `AT_FDCWD`) or `execveat(dirfd, path, argv, envp, flags)`.
/// `launch`: the supervisor itself is starting the program; the first exec under the filter is
/// that launch (nothing else ran in the child since the filter was installed), allowed without a
/// decision or an event. (Its memory could not be read anyway: the child of the non-dumpable
/// supervisor is non-dumpable until it executes.)
pub(crate) fn execve(
    cx: &mut Cx<'_>,
    dirfd: i32,
    (path_arg, argv_arg): (usize, usize),
    flags: i32,
    launch: &mut bool,
) -> Outcome {
    if std::mem::take(launch) {
        return Reply::Continue.into();
    }
    let path = match cx.path(path_arg) {
        Ok(p) => p,
        Err(e) => return e.into(),
    };
    let how = if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
        Lookup::NOFOLLOW
    } else {
        Lookup::FOLLOW
    };
    let found = match resolve::lookup(&cx.task, dirfd, &path, how) {
        Ok(f) => f,
        Err(e) => return e.into(),
    };
    let addr = cx.arg(argv_arg);
    let argv = match cx
        .mem()
        .and_then(|m| m.read_argv(addr, MAX_ARGS, MAX_ARG_BYTES))
    {
        Ok(a) => a,
        Err(e) => return e.into(),
    };
    let program = String::from_utf8_lossy(&cx.policy_path(&found.path)).into_owned();
    let args: Vec<String> = argv
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let by_command = Judgement::of(&cx.policy.decide_command(&program, &args));
    // A line an operator approved before the run is not asked again (only a hold is lifted).
    let by_command = cx.approved.apply(by_command, &program, &args);
    let by_file = cx.judge_file(&[Operation::Exec], program.as_bytes());
    let j = by_command.stricter(by_file);
    let shown = events::argv_text(&argv);
    let cwd = cx.task.cwd();
    let pid = cx.task.tgid();
    cx.counters.decided += 1;
    cx.log
        .push(events::process(pid, shown.clone(), cwd, &j), cx.sink);
    let line = if shown.is_empty() {
        program.clone()
    } else {
        shown.join(" ")
    };
    if matches!(
        j.decision,
        scriptgate_policy::Decision::Allow | scriptgate_policy::Decision::Log
    ) {
        // An approved one is remembered when it is approved.
        cx.counters.remember(line.clone());
    }
    cx.gate(
        OperationType::Exec,
        || line,
        Some((program, shown)),
        j,
        Box::new(|| Reply::Continue),
    )
}
