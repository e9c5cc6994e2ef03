//! A worker steps over a command whose stored bytes are damaged: it sets the
//! record aside as a `decode_failed` dead letter, commits past it and
//! answers the commands around it.
//!
//! Two kinds of damage: a record whose bytes fail their integrity check (on
//! the embedded log, whose database lets a test damage a stored record
//! behind the log's back; no payload can be kept), and an Iggy message
//! whose user header block is malformed (any Iggy client can write one;
//! its payload is intact and kept in the dead letter, so it can be
//! redriven).

use crate::support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use agdx::CommandRequest;
use agdx::log::LogError;
use agdx::wire::DeadLetterReason;
use agdx::worker::EchoHandler;
use iggy::prelude::{Client, IggyClient, IggyMessage, MessageClient, Partitioning};
use support::embedded::damage_payload;
use support::eventually;
use support::fabric::{Fabric, Running, agent_id, echoed, embedded_fabric, fabrics};

/// Sends a `hello` to `echo` with each of `bodies`, all in one
/// conversation, so they land in one partition, in order; the requester
/// is returned with the watches, which hear replies while it lives.
async fn send_in_order(
    fabric: &Fabric,
    bodies: &[&[u8]],
) -> (agdx::Requester, Vec<agdx::ReplyWatch>) {
    let requester = fabric.requester("asker");
    let conversation = agdx::new_conversation_id();
    let mut watches = Vec::new();
    for body in bodies {
        let request = CommandRequest::new("hello", body.to_vec())
            .to(agent_id("echo"))
            .conversation(conversation);
        watches.push(requester.send(request).await.expect("send"));
    }
    (requester, watches)
}

/// Waits for the echo worker's commit on `partition` to reach `offset`
/// (the worker's group is its agent's name).
async fn committed_through(fabric: &Fabric, partition: u32, offset: u64) {
    eventually("the commit to reach the last command", || async {
        let committed = fabric
            .log
            .committed_offset(&fabric.topology.commands, "echo", partition)
            .await
            .expect("committed_offset");
        (committed == Some(offset)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_command_is_dead_lettered_and_the_commands_around_it_are_answered() {
    let fabric = embedded_fabric("damaged").await;
    let commands = &fabric.topology.commands;
    let bodies: [&[u8]; 3] = [b"first", b"second", b"third"];
    let (_requester, mut watches) = send_in_order(&fabric, &bodies).await;
    let partition = watches[0].sent().partition;
    for (offset, body) in bodies.iter().enumerate() {
        let command = fabric.command_at(partition, offset as u64).await;
        let envelope = agdx::envelope_of(&command).expect("a command");
        assert_eq!(
            envelope.body, *body,
            "command {offset} sits at offset {offset}"
        );
    }

    let damaged = commands.position(partition, 1);
    damage_payload(&fabric.dir.path().join("log"), commands, partition, 1);
    let reason = match fabric
        .log
        .poll(commands, partition, 1, 1, Duration::ZERO)
        .await
    {
        Err(LogError::Corrupt(damage))
            if damage.position == damaged && damage.count() == 1 && damage.payload.is_none() =>
        {
            damage.reason
        }
        other => panic!("the damaged record reads as corrupt, got {other:?}"),
    };

    let worker = fabric.worker("echo").handle("hello", EchoHandler);
    let stats = worker.stats();
    let running = Running::start(worker);

    let first = echoed(&mut watches[0], bodies[0]).await;
    assert_eq!(
        first.envelope.cause_at,
        Some(commands.position(partition, 0))
    );
    let third = echoed(&mut watches[2], bodies[2]).await;
    assert_eq!(
        third.envelope.cause_at,
        Some(commands.position(partition, 2))
    );

    committed_through(&fabric, partition, 2).await;

    let dead_letters = fabric.dead_letters().await;
    assert_eq!(dead_letters.len(), 1, "one damaged record, one dead letter");
    let capsule = &dead_letters[0];
    assert_eq!(capsule.reason, DeadLetterReason::DecodeFailed);
    assert_eq!(capsule.source, damaged);
    assert!(capsule.payload.is_empty(), "no bytes of a damaged record");
    assert_eq!(
        capsule.detail.as_deref(),
        Some(reason.as_str()),
        "the capsule says what the log found wrong"
    );

    let responses = fabric.responses().await;
    assert_eq!(
        responses.len(),
        2,
        "the commands around the damaged one are answered, it is not"
    );
    // Stopped, the pool has settled every count.
    running.stop().await;
    assert_eq!(stats.handled.load(Ordering::SeqCst), 2);
    assert_eq!(stats.dead_lettered.load(Ordering::SeqCst), 1);
    assert_eq!(stats.committed_records.load(Ordering::SeqCst), 3);
}

/// Damage right after a full poll: the last command of that poll, carried
/// over to be handled with what follows it, is answered before the damaged
/// record is dead-lettered and stepped over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_right_after_a_full_poll_leaves_its_last_command_answered() {
    let fabric = embedded_fabric("damaged-boundary").await;
    let commands = &fabric.topology.commands;
    let bodies: [&[u8]; 4] = [b"c0", b"c1", b"c2", b"c3"];
    let (_requester, mut watches) = send_in_order(&fabric, &bodies).await;
    let partition = watches[0].sent().partition;
    damage_payload(&fabric.dir.path().join("log"), commands, partition, 2);

    // Polls of 2: c0 and c1, c1 carried; then the damage at offset 2.
    let worker = agdx::worker::Worker::new(
        fabric.producer("echo"),
        agdx::worker::WorkerConfig {
            poll_batch: 2,
            ..support::fabric::quick_config(fabric.dir.path().join("state-echo"))
        },
    )
    .handle("hello", EchoHandler);
    let stats = worker.stats();
    let running = Running::start(worker);
    let mut answered_at = Vec::new();
    for n in [0, 1, 3] {
        let reply = echoed(&mut watches[n], bodies[n]).await;
        assert_eq!(
            reply.envelope.cause_at,
            Some(commands.position(partition, n as u64))
        );
        answered_at.push(reply.timestamp_micros);
    }
    committed_through(&fabric, partition, 3).await;
    let dead_letters = fabric.dead_letters().await;
    assert_eq!(dead_letters.len(), 1, "{dead_letters:?}");
    assert_eq!(dead_letters[0].source, commands.position(partition, 2));
    // c1 was published (and committed) before the commit past the damage.
    let set_aside = fabric.records(&fabric.topology.dlq).await[0].timestamp_micros;
    assert!(
        answered_at[1] <= set_aside,
        "c1 answered at {} after the damage was set aside at {set_aside}",
        answered_at[1]
    );
    running.stop().await;
    assert_eq!(stats.handled.load(Ordering::SeqCst), 3);
    assert_eq!(stats.dead_lettered.load(Ordering::SeqCst), 1);
}

/// Sends `payload` to `partition` of the commands topic as another Iggy
/// client would, with a user header block that ends in the middle of a
/// field (a name of kind string claiming 200 bytes, with one there).
async fn send_with_a_malformed_header_block(fabric: &Fabric, partition: u32, payload: Vec<u8>) {
    let client = IggyClient::from_connection_string(&fabric.spec).expect("a connection string");
    client.connect().await.expect("the plain client connects");
    let block: &'static [u8] = &[2, 200, 0, 0, 0, b'k'];
    let mut message = IggyMessage::builder()
        .payload(payload.into())
        .build()
        .expect("a message");
    message.header.user_headers_length = block.len() as u32;
    message.user_headers = Some(block.into());
    let commands = &fabric.topology.commands;
    client
        .send_messages(
            &commands.stream_id.try_into().expect("a stream id"),
            &commands.topic_id.try_into().expect("a topic id"),
            &Partitioning::partition_id(partition),
            &mut [message],
        )
        .await
        .expect("the server takes the raw header block as it is");
    client.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_iggy_command_with_a_malformed_header_block_is_dead_lettered_with_its_payload() {
    for fabric in fabrics("malformed-headers").await {
        if fabric.backend != "iggy" {
            // Only an Iggy message has a header block another client can break.
            continue;
        }
        let conversation = agdx::new_conversation_id();
        let partition = agdx::routing::partition_of(&fabric.topology.commands, conversation);
        // A well-formed command whose only fault is the header block around it.
        let command = agdx::wire::AgentEnvelope::command(
            agdx::new_record_id(),
            conversation,
            agent_id("asker"),
            agdx::new_correlation_id(),
            Some("hello"),
            b"under bad headers".to_vec(),
        )
        .with_target(agent_id("echo"))
        .encode();
        send_with_a_malformed_header_block(&fabric, partition, command.clone()).await;
        let running = fabric.echo_after(conversation, b"after").await;
        let dead_letters = fabric.dead_letters().await;
        assert_eq!(dead_letters.len(), 1);
        let capsule = &dead_letters[0];
        assert_eq!(capsule.reason, DeadLetterReason::DecodeFailed);
        assert_eq!(
            capsule.source,
            fabric.topology.commands.position(partition, 0)
        );
        assert_eq!(
            capsule.payload, command,
            "the payload is kept byte for byte, ready to redrive"
        );
        assert!(
            capsule
                .detail
                .as_deref()
                .is_some_and(|d| d.contains("malformed user header block")),
            "{capsule:?}"
        );
        running.stop().await;
    }
}
