//! The embedded log's topics as stored: one looked up by name or by ids,
//! every topic of a stream or of the log, and creating one.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{EmbeddedLog, Fault, LogError, TopicInfo, TopicRow, blocking, now_micros, retention};

/// A row of [`SELECT_TOPIC`]; a stored topic without partitions (only a
/// changed database holds one) is [`LogError::NoPartitions`], as on Iggy.
pub(super) fn topic_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<TopicRow, LogError>> {
    let key = row.get(0)?;
    let info = TopicInfo::resolved(
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
    );
    Ok(info.map(|info| TopicRow { key, info }))
}

pub(super) const SELECT_TOPIC: &str = "SELECT t.topic_key, s.name, t.name, s.id, t.id, t.partitions
     FROM topics t JOIN streams s ON s.id = t.stream_id";

/// Looks a topic up by `filter` ([`BY_ID`] or [`BY_NAME`]) with its two
/// parameters (see [`topic_row`]).
pub(super) fn find_topic(
    conn: &Connection,
    filter: &str,
    params: impl rusqlite::Params,
) -> Result<Option<TopicRow>, Fault> {
    let row = conn
        .prepare_cached(&format!("{SELECT_TOPIC} WHERE {filter}"))?
        .query_row(params, topic_row)
        .optional()?;
    Ok(row.transpose()?)
}

/// [`find_topic`] by stream id and topic id.
pub(super) const BY_ID: &str = "s.id = ?1 AND t.id = ?2";
/// [`find_topic`] by stream name and topic name.
pub(super) const BY_NAME: &str = "s.name = ?1 AND t.name = ?2";

/// Creates the stream and topic unless they exist; checks the partition count.
pub(super) fn ensure_topic(
    conn: &mut Connection,
    stream: &str,
    topic: &str,
    partitions: u32,
    retention: crate::log::Retention,
) -> Result<TopicRow, Fault> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if let Some(row) = find_topic(&tx, BY_NAME, params![stream, topic])? {
        if row.info.partitions.get() != partitions {
            return Err(LogError::PartitionMismatch {
                stream: stream.to_owned(),
                topic: topic.to_owned(),
                existing: row.info.partitions.get(),
                wanted: partitions,
            }
            .into());
        }
        return Ok(row);
    }
    let now = now_micros()?;
    let stream_id: Option<u32> = tx
        .query_row("SELECT id FROM streams WHERE name = ?1", [stream], |row| {
            row.get(0)
        })
        .optional()?;
    let stream_id = match stream_id {
        Some(id) => id,
        None => {
            let id: u32 =
                tx.query_row("SELECT coalesce(max(id), 0) + 1 FROM streams", [], |row| {
                    row.get(0)
                })?;
            tx.execute(
                "INSERT INTO streams (id, name, created_micros) VALUES (?1, ?2, ?3)",
                params![id, stream, now],
            )?;
            id
        }
    };
    let topic_id: u32 = tx.query_row(
        "SELECT coalesce(max(id), 0) + 1 FROM topics WHERE stream_id = ?1",
        [stream_id],
        |row| row.get(0),
    )?;
    tx.execute(
        "INSERT INTO topics (stream_id, id, name, partitions, created_micros) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![stream_id, topic_id, topic, partitions, now],
    )?;
    let key = tx.last_insert_rowid();
    retention::set(&tx, key, retention)?;
    let row = TopicRow {
        key,
        info: TopicInfo::resolved(
            stream.to_owned(),
            topic.to_owned(),
            stream_id,
            topic_id,
            partitions,
        )?,
    };
    tx.commit()?;
    Ok(row)
}

impl EmbeddedLog {
    /// Every topic of `stream`, ascending by name ([`crate::log::Log::topics`]).
    pub(super) async fn stream_topics(&self, stream: &str) -> Result<Vec<TopicInfo>, LogError> {
        let core = self.core.clone();
        let stream = stream.to_owned();
        blocking(move || {
            core.with_reader(|conn| {
                let rows = conn
                    .prepare_cached(&format!("{SELECT_TOPIC} WHERE s.name = ?1 ORDER BY t.name"))?
                    .query_map(params![stream], topic_row)?
                    .collect::<Result<Vec<_>, _>>()?;
                // Left out, as the port says: nothing can be appended to it.
                Ok(rows.into_iter().flatten().map(|row| row.info).collect())
            })
        })
        .await
    }

    /// Every topic the log holds, in every stream.
    pub(super) async fn stored_topics(&self) -> Result<Vec<TopicInfo>, LogError> {
        let core = self.core.clone();
        blocking(move || {
            core.with_reader(|conn| {
                let rows = conn
                    .prepare(SELECT_TOPIC)?
                    .query_map([], topic_row)?
                    .collect::<Result<Vec<_>, _>>()?;
                // A topic without partitions holds nothing to verify.
                Ok(rows.into_iter().flatten().map(|row| row.info).collect())
            })
        })
        .await
    }
}
