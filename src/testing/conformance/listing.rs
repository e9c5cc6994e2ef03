//! The conformance check of listing a stream's topics ([`Log::topics`]).
//!
//! [`Log::topics`]: crate::log::Log::topics

use super::Subject;

/// Listing a stream names each of its topics once, ascending by name and
/// as [`Log::topic`](crate::log::Log::topic) resolves them, and nothing of
/// another stream, even one whose name starts with this one's; a stream
/// that does not exist lists nothing.
pub async fn listing_a_stream_names_each_of_its_topics(Subject { log, stream, .. }: Subject) {
    assert_eq!(
        log.topics(&stream)
            .await
            .expect("topics of a missing stream"),
        Vec::new(),
        "a stream that does not exist has no topics"
    );
    let sibling = format!("{stream}x");
    let other = log
        .ensure_topic(&sibling, "b-second", 1)
        .await
        .expect("ensure_topic in the sibling stream");
    // Made out of order, so an unsorted listing shows.
    for (name, partitions) in [("b-second", 2), ("agent.inbox.x", 3), ("a-first", 1)] {
        log.ensure_topic(&stream, name, partitions)
            .await
            .expect("ensure_topic");
    }
    let mut expected = Vec::new();
    for name in ["a-first", "agent.inbox.x", "b-second"] {
        expected.push(
            log.topic(&stream, name)
                .await
                .expect("topic")
                .expect("the topic just made"),
        );
    }
    assert_eq!(
        log.topics(&stream).await.expect("topics"),
        expected,
        "every topic of the stream, by name, none of stream '{sibling}'"
    );
    assert_eq!(
        log.topics(&sibling).await.expect("topics of the sibling"),
        vec![other],
        "the sibling stream lists its own topic only"
    );
}
