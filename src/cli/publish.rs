//! `agdx publish`: append pre-encoded envelopes verbatim.

use std::path::PathBuf;

use clap::Args;

use agdx::log::OutgoingRecord;
use agdx::wire::{AgentEnvelope, ContentType, check_header_caps, record_headers};

use super::context::{Failure, Global};

/// Appends each FILE (one encoded envelope) to a topic byte for byte: it
/// must decode, validate and re-encode to the same bytes first. The headers
/// are derived from the envelope, and the partition from its conversation.
/// For tests, interop and redrive: nothing is re-signed or changed.
#[derive(Debug, Args)]
pub struct PublishArgs {
    /// The topic (an agent topic such as agent.registry, or any topic of the stream).
    #[arg(long, value_name = "TOPIC")]
    pub topic: String,

    /// The body's content type for the agdx.ct header (default: the one the
    /// signature binds, else raw).
    #[arg(long, value_name = "TYPE")]
    pub content_type: Option<ContentType>,

    /// Files holding one encoded envelope each.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

pub async fn run(global: &Global, args: PublishArgs) -> Result<(), Failure> {
    let (log, topology) = global.topology().await?;
    let topic = match topology.by_name(&args.topic) {
        Some(topic) => topic.clone(),
        None => log
            .topic(&global.stream, &args.topic)
            .await?
            .ok_or_else(|| {
                Failure::new(format!(
                    "no topic '{}' in stream '{}'; the agent topics are: {}",
                    args.topic,
                    global.stream,
                    topology
                        .all()
                        .iter()
                        .map(|t| t.topic.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?,
    };
    // Everything is checked before anything is appended.
    let mut records = Vec::with_capacity(args.files.len());
    for file in &args.files {
        let bad =
            |why: String| Failure::new(format!("{}: {why}; nothing was published", file.display()));
        let bytes = std::fs::read(file).map_err(|e| bad(format!("cannot read: {e}")))?;
        let envelope = AgentEnvelope::decode_valid(&bytes).map_err(|e| bad(e.to_string()))?;
        if envelope.encode() != bytes {
            return Err(bad(
                "the envelope is valid but not in canonical form, so it would not be published verbatim; re-encode it with `agdx wire decode | agdx wire encode`".into(),
            ));
        }
        let content_type = args
            .content_type
            .or_else(|| envelope.signature.as_ref()?.context?.content_type)
            .unwrap_or(ContentType::Raw);
        let headers = record_headers(&envelope, content_type);
        check_header_caps(&headers).map_err(|e| bad(e.to_string()))?;
        let partition = agdx::routing::partition_of(&topic, envelope.conversation);
        records.push((
            file,
            envelope,
            partition,
            OutgoingRecord {
                headers,
                payload: bytes.into(),
            },
        ));
    }
    for (file, envelope, partition, record) in records {
        log.append(&topic, partition, vec![record]).await?;
        println!(
            "published {} record={} topic={} partition={partition}",
            file.display(),
            envelope.record.map(|r| r.to_string()).unwrap_or_default(),
            topic.topic,
        );
    }
    Ok(())
}
