//! Calls that run another callable later with the arguments they were handed: timers, threads,
//! processes, executors, event-loop callbacks, `atexit` and `sched`.
//!
//! `threading.Timer(60, subprocess.call, args=(["rm", "-rf", "/"],))` runs `subprocess.call` with
//! that list; rules must see that call, so its callee names include the scheduled callable's and
//! its arguments are the ones the scheduler passes on.

use tree_sitter::Node;

use super::{PySem, function_of};

/// Where a scheduler takes the callable and its arguments.
struct Shape {
    /// The scheduler's last name segment (`Timer`, `submit`).
    method: &'static str,
    /// Qualified names it must resolve to; empty for methods of objects the rules cannot type
    /// (`executor.submit`, `loop.call_later`), which are recognised by their name alone.
    qualified: &'static [&'static str],
    /// The callable: its position and keyword.
    target: (Option<usize>, Option<&'static str>),
    args: Args,
    /// The keyword-argument mapping (position, keyword); `None`: the scheduler's other keywords
    /// are passed on as they are.
    kwargs: Option<(Option<usize>, &'static str)>,
}

enum Args {
    /// Every positional argument from this one on (`submit(fn, *args)`).
    Rest(usize),
    /// One tuple or list argument (`Timer(t, fn, args=(…))`): position and keyword.
    Tuple(Option<usize>, &'static str),
}

const THREADS: &[&str] = &[
    "threading.Thread",
    "multiprocessing.Process",
    "multiprocessing.context.Process",
];

const SHAPES: &[Shape] = &[
    Shape {
        method: "Timer",
        qualified: &["threading.Timer"],
        target: (Some(1), Some("function")),
        args: Args::Tuple(Some(2), "args"),
        kwargs: Some((Some(3), "kwargs")),
    },
    Shape {
        method: "Thread",
        qualified: THREADS,
        target: (Some(1), Some("target")),
        args: Args::Tuple(Some(3), "args"),
        kwargs: Some((Some(4), "kwargs")),
    },
    Shape {
        method: "Process",
        qualified: THREADS,
        target: (Some(1), Some("target")),
        args: Args::Tuple(Some(3), "args"),
        kwargs: Some((Some(4), "kwargs")),
    },
    Shape {
        method: "start_new_thread",
        qualified: &["_thread.start_new_thread", "thread.start_new_thread"],
        target: (Some(0), None),
        args: Args::Tuple(Some(1), "args"),
        kwargs: Some((Some(2), "kwargs")),
    },
    Shape {
        method: "register",
        qualified: &["atexit.register"],
        target: (Some(0), None),
        args: Args::Rest(1),
        kwargs: None,
    },
    Shape {
        method: "to_thread",
        qualified: &["asyncio.to_thread"],
        target: (Some(0), None),
        args: Args::Rest(1),
        kwargs: None,
    },
    Shape {
        method: "submit",
        qualified: &[],
        target: (Some(0), None),
        args: Args::Rest(1),
        kwargs: None,
    },
    Shape {
        method: "call_soon",
        qualified: &[],
        target: (Some(0), None),
        args: Args::Rest(1),
        kwargs: None,
    },
    Shape {
        method: "call_soon_threadsafe",
        qualified: &[],
        target: (Some(0), None),
        args: Args::Rest(1),
        kwargs: None,
    },
    Shape {
        method: "call_later",
        qualified: &[],
        target: (Some(1), None),
        args: Args::Rest(2),
        kwargs: None,
    },
    Shape {
        method: "call_at",
        qualified: &[],
        target: (Some(1), None),
        args: Args::Rest(2),
        kwargs: None,
    },
    Shape {
        method: "run_in_executor",
        qualified: &[],
        target: (Some(1), None),
        args: Args::Rest(2),
        kwargs: None,
    },
    Shape {
        method: "enter",
        qualified: &[],
        target: (Some(2), Some("action")),
        args: Args::Tuple(Some(3), "argument"),
        kwargs: Some((Some(4), "kwargs")),
    },
    Shape {
        method: "enterabs",
        qualified: &[],
        target: (Some(2), Some("action")),
        args: Args::Tuple(Some(3), "argument"),
        kwargs: Some((Some(4), "kwargs")),
    },
    Shape {
        method: "apply_async",
        qualified: &[],
        target: (Some(0), Some("func")),
        args: Args::Tuple(Some(1), "args"),
        kwargs: Some((Some(2), "kwds")),
    },
];

/// A callable a scheduler runs, with the arguments it passes.
#[derive(Debug)]
pub struct Deferred<'a> {
    pub target: Node<'a>,
    pub args: Vec<Node<'a>>,
    pub keywords: Vec<(String, Node<'a>)>,
}

/// Whether a callee's last name segment may be a scheduler (the cheap test before resolving).
pub(super) fn may_defer(last: &str) -> bool {
    SHAPES.iter().any(|s| s.method == last)
}

impl<'a> PySem<'a> {
    /// The callable `call` schedules and the arguments it will get, when `call` is a scheduler.
    pub fn deferred(&self, call: Node<'a>) -> Option<Deferred<'a>> {
        let func = function_of(call)?;
        let last = self.last_segment(func);
        let shape = SHAPES.iter().find(|s| s.method == last.as_ref())?;
        if !shape.qualified.is_empty() {
            let names = self.names(func);
            if !names.iter().any(|n| shape.qualified.contains(&n.as_str())) {
                return None;
            }
        }
        let positional = self.positional(call);
        let keywords = self.keywords(call);
        let by_name = |name: &str| keywords.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        let pick = |(at, name): (Option<usize>, Option<&str>)| {
            name.and_then(by_name)
                .or_else(|| at.and_then(|i| positional.get(i).copied()))
        };
        let target = pick(shape.target)?;
        let args = match shape.args {
            Args::Rest(from) => positional.iter().skip(from).copied().collect(),
            Args::Tuple(at, name) => pick((at, Some(name)))
                .and_then(|t| self.literal_items(t, 0))
                .unwrap_or_default(),
        };
        let keywords = match shape.kwargs {
            Some((at, name)) => pick((at, Some(name)))
                .map(|m| self.mapping_pairs(m, 0))
                .unwrap_or_default(),
            None => keywords,
        };
        Some(Deferred {
            target,
            args,
            keywords,
        })
    }
}
