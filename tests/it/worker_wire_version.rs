//! The wire version header (`agdx.av`) is read before the payload: a
//! command of another version is dead-lettered `decode_failed` with a
//! detail naming the version, never decoded as version 1, and the commands
//! after it are answered.

use crate::support;

use agdx::log::OutgoingRecord;
use agdx::wire::{
    AgentEnvelope, ContentType, DeadLetterReason, HEADER_WIRE_VERSION, HeaderValue, record_headers,
};
use support::fabric::{agent_id, fabrics};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_of_another_wire_version_is_dead_lettered_naming_it() {
    for fabric in fabrics("wire-version").await {
        let commands = &fabric.topology.commands;
        let conversation = agdx::new_conversation_id();
        let partition = agdx::routing::partition_of(commands, conversation);
        // A command that would decode and validate as version 1.
        let command = AgentEnvelope::command(
            agdx::new_record_id(),
            conversation,
            agent_id("asker"),
            agdx::new_correlation_id(),
            Some("hello"),
            b"from the future".to_vec(),
        )
        .with_target(agent_id("echo"));
        let payload = command.encode();
        let mut headers = record_headers(&command, ContentType::Raw);
        let version = headers
            .iter_mut()
            .find(|(key, _)| key == HEADER_WIRE_VERSION)
            .expect("record headers carry the wire version");
        version.1 = HeaderValue::u32(2);
        fabric
            .log
            .append(
                commands,
                partition,
                vec![OutgoingRecord {
                    headers,
                    payload: payload.clone().into(),
                }],
            )
            .await
            .expect("append the version 2 command");

        fabric.echo_after(conversation, b"after").await.stop().await;

        let dead_letters = fabric.dead_letters().await;
        assert_eq!(dead_letters.len(), 1, "{}", fabric.backend);
        let capsule = &dead_letters[0];
        assert_eq!(capsule.reason, DeadLetterReason::DecodeFailed);
        assert_eq!(capsule.source, commands.position(partition, 0));
        assert_eq!(capsule.payload, payload, "kept byte for byte");
        let detail = capsule.detail.as_deref().unwrap_or_default();
        assert!(
            detail.contains("agdx.av") && detail.contains("version 2"),
            "{}: {detail}",
            fabric.backend
        );
        let responses = fabric.responses().await;
        assert_eq!(
            responses.len(),
            1,
            "{}: only the version 1 command is answered",
            fabric.backend
        );
    }
}
