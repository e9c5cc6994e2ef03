//! IOA's `listen`: Server-Sent Events read off the wire (`event: message`,
//! `id:`, `data:` and `: keepalive` comments), each stream showing what its
//! read mode shows, and a reconnect with `Last-Event-ID` that neither loses
//! nor repeats a message, also across a restart of the bridge. On every
//! backend.

use crate::support;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;
use support::ioa::{Bridge, Events, Frame, KEEPALIVE};
use support::on_every_backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_resumes_from_last_event_id_without_losing_or_repeating() {
    on_every_backend("ioa-listen", |subject| async move {
        let bridge = Bridge::start(subject.log.clone(), &subject.stream).await;
        let alice = bridge.register("alice").await;
        let bob = bridge.register("bob").await;
        let space = alice.space("live", "writer").await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        bob.space("live", "reader").await;
        let before = alice.say(&space, "before", &[]).await;
        let listen = format!("/spaces/{space}/messages?listen=true&all=true");
        let mut events = Events::open(&bob, &listen, None).await;

        // Idle: only keep-alive comments.
        match events.next_within(KEEPALIVE * 4).await {
            Some(Frame::Comment(text)) => assert_eq!(text, "keepalive"),
            other => panic!("a keep-alive comment while idle, not {other:?}"),
        }

        let first = alice.say(&space, "one", &[&before]).await;
        let second = alice.say(&space, "two", &[&first]).await;
        let (id, data) = events.next_message().await;
        assert_eq!(
            (id.as_str(), data["content"]["text"].as_str()),
            (first.as_str(), Some("one"))
        );
        assert_eq!(data["space_id"], space.as_str());
        let (id, _) = events.next_message().await;
        assert_eq!(id, second);
        drop(events);

        // Written while nobody listens.
        let mut missed = Vec::new();
        for n in 3..=5 {
            missed.push(alice.say(&space, &format!("m{n}"), &[]).await);
        }
        let mut events = Events::open(&bob, &listen, Some(&second)).await;
        for want in &missed {
            let (id, _) = events.next_message().await;
            assert_eq!(&id, want, "resumed in order, nothing lost");
        }
        let live = alice.say(&space, "live", &[]).await;
        let (id, _) = events.next_message().await;
        assert_eq!(id, live, "then live, nothing repeated");
        events.expect_quiet(KEEPALIVE * 2).await;

        // `after` starts a listener at a cursor too.
        let mut from_after =
            Events::open(&bob, &format!("{listen}&after={}", missed[1]), None).await;
        assert_eq!(from_after.next_message().await.0, missed[2]);
        assert_eq!(from_after.next_message().await.0, live);
        drop(from_after);

        let (status, refused) = bob
            .call(
                Method::GET,
                &format!("/spaces/{space}/sse"),
                None,
                &[("last-event-id", "01J0000000000000000000000X")],
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
        drop(events);

        // Across a restart of the bridge.
        bridge.stop().await;
        let reopened = (subject.reopen)().await;
        let bridge = Bridge::start(reopened.log.clone(), &subject.stream).await;
        let mut alice = alice.clone();
        alice.url = bridge.url.clone();
        let mut bob = bob.clone();
        bob.url = bridge.url.clone();
        let after_restart = alice.say(&space, "after the restart", &[]).await;
        let mut events = Events::open(&bob, &listen, Some(&missed[2])).await;
        assert_eq!(events.next_message().await.0, live);
        assert_eq!(events.next_message().await.0, after_restart);
        events.expect_quiet(KEEPALIVE * 2).await;
        drop(events);
        bridge.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_stream_shows_what_its_read_shows() {
    on_every_backend("ioa-streams", |subject| async move {
        let bridge = Bridge::start(subject.log.clone(), &subject.stream).await;
        let alice = bridge.register("alice").await;
        let bob = bridge.register("bob").await;
        let space = alice.space("streams", "writer").await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        bob.space("streams", "reader").await;
        let other = alice.space("elsewhere", "writer").await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let root = alice.say(&space, "root", &[]).await;
        let side = alice.say(&space, "side", &[]).await;

        let mut everything = Events::open(&bob, &format!("/spaces/{space}/sse"), None).await;
        let mut below_root =
            Events::open(&bob, &format!("/spaces/{space}/messages/{root}/sse"), None).await;
        let mut for_bob =
            Events::open(&bob, &format!("/spaces/{space}/messages?listen=true"), None).await;
        let mut bobs_node = Events::open(&bob, "/nodes/bob/sse", None).await;
        let mut below_side = Events::open(
            &bob,
            &format!("/spaces/{space}/messages?listen=true&message_id={side}&direction=downstream"),
            None,
        )
        .await;

        let child = alice.say(&space, "child", &[&root]).await;
        let grandchild = alice.say(&space, "grandchild", &[&child]).await;
        let to_bob = alice
            .send(
                &space,
                json!({"content": {"text": "to bob"}, "refs": {"nodes": ["bob"]}}),
            )
            .await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let broadcast = alice.say(&space, "broadcast", &[]).await;
        let own = bob.say(&space, "bob's own", &[]).await;
        let elsewhere = alice
            .send(
                &other,
                json!({"content": {"text": "elsewhere"}, "refs": {"nodes": ["bob"]}}),
            )
            .await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let merged = alice.say(&space, "merged", &[&side, &grandchild]).await;

        let all = vec![
            child.clone(),
            grandchild.clone(),
            to_bob.clone(),
            broadcast.clone(),
            own.clone(),
            merged.clone(),
        ];
        assert_eq!(everything.ids(6).await, all);
        assert_eq!(below_root.ids(3).await, [child, grandchild, merged.clone()]);
        assert_eq!(
            for_bob.ids(2).await,
            [to_bob.clone(), broadcast],
            "addressed to bob or broadcast, not his own"
        );
        assert_eq!(
            bobs_node.ids(2).await,
            [to_bob, elsewhere],
            "naming bob, in any space"
        );
        assert_eq!(below_side.ids(1).await, [merged]);
        let quiet = Duration::from_millis(300);
        everything.expect_quiet(quiet).await;
        below_root.expect_quiet(quiet).await;
        for_bob.expect_quiet(quiet).await;
        bobs_node.expect_quiet(quiet).await;
        below_side.expect_quiet(quiet).await;
        bridge.stop().await;
    })
    .await;
}
