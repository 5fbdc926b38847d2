//! Prometheus metrics at `/metrics`: executions by outcome, validation rejections by layer and
//! rule, stage latency histograms (validate, queue, run), and the sandbox's containers in flight
//! and warm pool, sampled when scraped. The `metrics` facade with its Prometheus exporter, rather
//! than hand-formatted text, keeps the exposition format and histogram maths someone else's
//! well-tested problem.

use std::sync::OnceLock;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::domain::record::{ExecutionRecord, Status};
use crate::domain::verdict::{Severity, Verdict};
use crate::sandbox::SandboxStats;

/// Seconds; from a warm run (a few ms) to the longest timeout.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// The process-wide recorder (the `metrics` facade has one global recorder; several services in
/// one process, as in tests, share it).
pub(crate) fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(BUCKETS)
            .expect("non-empty buckets")
            .build_recorder();
        let handle = recorder.handle();
        // Fails only when another recorder is installed already, and then ours stays empty: the
        // endpoint still answers, with the sandbox gauges.
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed; /metrics shows gauges only");
        }
        describe();
        handle
    })
}

fn describe() {
    metrics::describe_counter!(
        "scriptgate_executions_total",
        "Finished executions by outcome: success, or the error type (validation_failed, timeout, resource_limit_exceeded, execution_failure, internal_error, denied, approval_timeout)"
    );
    metrics::describe_counter!(
        "scriptgate_validations_total",
        "Scripts validated (queued work again before it runs), by language and result (valid or rejected)"
    );
    metrics::describe_counter!(
        "scriptgate_validation_rejections_total",
        "Blocking findings of rejected scripts, by layer and rule"
    );
    metrics::describe_histogram!(
        "scriptgate_stage_seconds",
        metrics::Unit::Seconds,
        "Time per stage of an execution: validate, queue (waiting for a run slot), run (in the container)"
    );
    metrics::describe_gauge!(
        "scriptgate_containers_in_flight",
        "Containers that exist now (warm, running, or being removed)"
    );
    metrics::describe_gauge!("scriptgate_pool_ready", "Warm containers waiting for a run");
}

/// A script was validated.
pub(crate) fn validated(verdict: &Verdict) {
    let result = if verdict.valid { "valid" } else { "rejected" };
    counter!("scriptgate_validations_total", "language" => verdict.language.as_str(), "result" => result)
        .increment(1);
    if let Some(layer) = verdict.layer {
        for f in verdict
            .findings
            .iter()
            .filter(|f| f.layer == layer && f.severity == Severity::Block)
        {
            counter!(
                "scriptgate_validation_rejections_total",
                "layer" => layer.as_str(),
                "rule" => f.rule.clone()
            )
            .increment(1);
        }
    }
}

/// An execution reached a terminal status.
pub(crate) fn finished(rec: &ExecutionRecord) {
    if !rec.status.is_terminal() {
        return;
    }
    let outcome = match &rec.error {
        None if rec.status == Status::Completed => "success",
        None => rec.status.as_str(),
        Some(e) => e.kind.as_str(),
    };
    counter!("scriptgate_executions_total", "outcome" => outcome).increment(1);
    let t = &rec.timings;
    histogram!("scriptgate_stage_seconds", "stage" => "validate").record(t.validate as f64 / 1e3);
    if rec.result.is_some() {
        histogram!("scriptgate_stage_seconds", "stage" => "queue").record(t.queue as f64 / 1e3);
        histogram!("scriptgate_stage_seconds", "stage" => "run").record(t.run as f64 / 1e3);
    }
}

/// The exposition text, with the sandbox gauges sampled now.
pub(crate) fn render(stats: &SandboxStats) -> String {
    let handle = handle();
    gauge!("scriptgate_containers_in_flight").set(stats.containers_in_flight as f64);
    gauge!("scriptgate_pool_ready").set(stats.pool_ready as f64);
    handle.run_upkeep();
    handle.render()
}
