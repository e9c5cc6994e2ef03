//! Reading the bodies of status `card`, `quarantine` and `unquarantine`:
//! `validate` accepts any status body, so the readers (the registry and
//! quarantine folds) get a typed error for a body they cannot use.

use agdx_wire::*;

fn agent(name: &str) -> AgentId {
    AgentId::new(name).unwrap()
}

fn status(operation: StatusOperation, body: &[u8]) -> AgentEnvelope {
    AgentEnvelope::status(
        RecordId::from_u128(1),
        ConversationId::from_u128(2),
        agent("operator"),
        operation,
        body.to_vec(),
    )
}

fn card() -> AgentCard {
    AgentCard {
        name: Some("summarizer".into()),
        capabilities: vec![CapabilityDescriptor::new("summarize")],
        ..AgentCard::default()
    }
}

#[test]
fn a_card_status_gives_its_card() {
    let e = AgentEnvelope::status_card(
        RecordId::from_u128(1),
        ConversationId::from_u128(2),
        agent("summarizer"),
        &card(),
    );
    assert_eq!(e.card_body(), Ok(card()));
}

#[test]
fn a_card_status_without_a_usable_card_is_a_typed_error() {
    assert_eq!(
        status(StatusOperation::Card, b"").card_body(),
        Err(StatusBodyError::Empty {
            operation: StatusOperation::Card
        })
    );
    let garbage = status(StatusOperation::Card, b"not cbor").card_body();
    assert!(
        matches!(
            garbage,
            Err(StatusBodyError::NotACard(WireError::Decode(_)))
        ),
        "{garbage:?}"
    );
    let over_cap = AgentCard {
        name: Some("n".repeat(257)),
        ..AgentCard::default()
    };
    let err = status(StatusOperation::Card, &over_cap.encode())
        .card_body()
        .unwrap_err();
    assert!(
        matches!(err, StatusBodyError::NotACard(WireError::Invalid(_))),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("the body of a status `card` is not a valid agent card: "),
        "{err}"
    );
}

#[test]
fn control_facts_name_the_agent_and_the_direction() {
    for quarantined in [true, false] {
        let e = AgentEnvelope::status_quarantine(
            RecordId::from_u128(1),
            ConversationId::from_u128(2),
            agent("operator"),
            &agent("rogue"),
            quarantined,
        );
        assert_eq!(
            e.control_fact(),
            Ok(ControlFact {
                agent: agent("rogue"),
                quarantined
            })
        );
    }
}

#[test]
fn a_control_fact_without_an_agent_id_is_a_typed_error() {
    let op = StatusOperation::Quarantine;
    assert_eq!(
        status(op, b"").control_fact(),
        Err(StatusBodyError::Empty { operation: op })
    );
    assert_eq!(
        status(op, &[0xff]).control_fact(),
        Err(StatusBodyError::NotUtf8 { operation: op })
    );
    let err = status(StatusOperation::Unquarantine, b"two\nlines")
        .control_fact()
        .unwrap_err();
    assert!(
        matches!(
            err,
            StatusBodyError::NotAnAgentId {
                operation: StatusOperation::Unquarantine,
                source: AgentIdError::ControlCharacter { .. }
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("the body of a status `unquarantine` is not an agent id: "),
        "{err}"
    );
}

#[test]
fn reading_the_wrong_status_is_a_typed_error() {
    let progress = status(StatusOperation::Progress, b"40%");
    assert_eq!(
        progress.card_body(),
        Err(StatusBodyError::NotThisStatus {
            wanted: &[StatusOperation::Card],
            kind: Kind::Status,
            operation: Some("progress".into())
        })
    );
    assert_eq!(
        progress.control_fact().unwrap_err().to_string(),
        "a status `progress` is not a status `quarantine` or `unquarantine`"
    );
    let event = AgentEnvelope::event(
        RecordId::from_u128(1),
        ConversationId::from_u128(2),
        agent("ledger"),
        card().encode(),
    );
    assert_eq!(
        event.card_body().unwrap_err().to_string(),
        "an event envelope is not a status `card`"
    );
}
