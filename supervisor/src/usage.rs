//! Resource usage from the container's memory cgroup (v1 or v2, as mounted by the runtime).

use scriptgate_supervisor::Usage;

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `key N` from a flat keyed file such as memory.events or memory.oom_control.
fn read_key(path: &str, key: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
}

pub(crate) fn measure(cpu_time_ms: u64, max_rss_bytes: u64) -> Usage {
    let peak = read_u64("/sys/fs/cgroup/memory/memory.max_usage_in_bytes")
        .or_else(|| read_u64("/sys/fs/cgroup/memory.peak"));
    let oom_kills = read_key("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill ")
        .or_else(|| read_key("/sys/fs/cgroup/memory.events", "oom_kill "))
        .unwrap_or(0);
    Usage {
        cpu_time_ms,
        max_memory_bytes: peak.unwrap_or(max_rss_bytes),
        oom_kills,
    }
}
