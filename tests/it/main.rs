//! The integration tests, one module per behaviour, in one binary so the
//! suite links the library once. Run one behaviour with
//! `cargo test --test it MODULE::`, e.g. `cargo test --test it log_embedded::`.
//!
//! The harness ([`support`]) runs the agdx binary and every backend, so the
//! suite needs the `cli` feature (which builds them all in); without it the
//! binary is empty.
#![cfg(feature = "cli")]

mod support;
mod view_snapshots;

mod agent_cards;
mod ask_idle;
mod ask_reply;
mod bench_baselines;
mod bridge_a2a;
mod bridge_ax_ipc;
mod bridge_ax_ipc_bad_input;
mod bridge_ax_ipc_cli;
mod bridge_ax_ipc_http;
mod bridge_ax_ipc_llm_proxy;
mod bridge_ax_ipc_taint;
mod bridge_axon;
mod bridge_axon_cli;
mod bridge_axon_daemon;
mod bridge_axon_refusals;
mod bridge_ioa;
mod bridge_ioa_contract;
mod bridge_ioa_events;
mod bridge_ioa_mcp;
mod bridge_ioa_nodes_apart;
mod bridge_mcp;
mod cancel;
mod causal_graph;
mod chunk_stream;
mod claim_check;
mod claim_check_hosts;
mod cli_connect_limits;
mod cli_contract;
mod cli_leaves_checkout_clean;
mod cli_quiet_exit;
mod cli_terminal_safety;
mod cli_which_log;
mod context;
mod demo;
mod deploy_compose;
mod dlq_redrive;
mod fencing;
mod fold_snapshot;
mod grants;
mod handover;
mod heartbeats;
mod idempotency;
mod idempotency_catch_up;
mod idempotency_concurrent;
mod idempotency_log_binding;
mod idempotency_retention;
mod iggy_quiet_close;
mod iggy_server_crash;
mod inbox_check_tail;
mod inbox_routing;
mod kafka_cluster;
mod log_conformance;
mod log_embedded;
mod log_embedded_damage;
mod log_iggy;
mod log_kafka;
mod netns_partition;
mod prepared_batches;
mod quarantine;
mod replay_busy_log;
mod replay_timeline;
mod reply_fields;
mod retention;
mod signed_commands;
mod signing_vectors;
mod task_states;
mod trust_cli;
mod trust_files;
mod wire_cli;
mod worker_crash;
mod worker_damaged_record;
mod worker_exec_processes;
mod worker_exec_stream;
mod worker_failover;
mod worker_failures;
mod worker_flush_retry;
mod worker_metrics;
mod worker_shutdown;
mod worker_slow_handler;
mod worker_unpublishable_answer;
mod worker_wire_version;
