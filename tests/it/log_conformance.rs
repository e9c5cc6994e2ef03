//! The log port's conformance suite (`agdx::testing::conformance`, defined
//! once in the library), run against every backend the harness finds (see
//! `support`).

use crate::support;

use agdx::testing::conformance::Check;
use support::on_every_backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_and_poll_keep_order() {
    on_every_backend("order", |s| Check::Order.run(s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_headers_round_trip() {
    on_every_backend("headers", |s| Check::Headers.run(s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_keyed_by_conversation_land_in_its_partition() {
    on_every_backend("keys", |s| Check::Keys.run(s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_members_split_partitions_and_survivors_take_over() {
    on_every_backend("group", |s| Check::Group.run(s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_a_group_hands_partitions_over_at_once() {
    on_every_backend("leave", |s| Check::Leave.run(s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_and_records_persist_across_restart() {
    on_every_backend("restart", |s| Check::Restart.run(s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_poll_wakes_on_append() {
    on_every_backend("wake", |s| Check::Wake.run(s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_keeps_to_the_byte_budget() {
    on_every_backend("budget", |s| Check::Budget.run(s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_give_typed_errors() {
    on_every_backend("errors", |s| Check::Errors.run(s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_and_commit_is_all_or_nothing() {
    on_every_backend("append-and-commit", |s| Check::AppendAndCommit.run(s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_a_stream_names_each_of_its_topics() {
    on_every_backend("topics", |s| Check::Topics.run(s)).await;
}
