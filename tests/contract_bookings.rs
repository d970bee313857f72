//! Bookings that cannot overlap: for an action whose policy conflicts by
//! time range, a retried booking with a slightly different time is a second
//! booking, refused with its own decision when it overlaps one already made
//! and held behind an open one (and released with every other booking it
//! does not overlap when that one fails); an exclusion constraint keeps even a
//! hand-written insert from double-booking.

mod common;
mod settle_support;

use chrono::{DateTime, TimeZone, Utc};
use effectwatch::ledger::actions::{CANCEL, RELEASE, SeenVersion};
use effectwatch::ledger::policies::{self, PolicyChange};
use effectwatch::ledger::writer::{
    Completion, Intent, Outcome, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{Decision, LedgerError, State};
use serde_json::json;
use settle_support::Rig;

fn at(hour: u32, minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2027, 3, 1, hour, minute, 0).unwrap()
}

fn booking(key: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> Intent {
    Intent {
        op_key: key.to_string(),
        action: "booking".into(),
        target: "room:12".into(),
        params: json!({ "guest": "Ada" }),
        requested_by: "agent-3".into(),
        during: Some((from, to)),
        ..Intent::default()
    }
}

async fn book_by_time(rig: &Rig) {
    policies::set(
        &rig.operator_pool,
        "booking",
        &PolicyChange {
            conflicts_by_time_range: Some(true),
            ..PolicyChange::default()
        },
        "alice",
        "rooms are booked by the hour",
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_retried_booking_with_a_shifted_time_is_a_second_booking_and_is_refused() {
    let rig = Rig::new().await;
    book_by_time(&rig).await;
    let pool = &rig.db.pool;
    let first = begin_effect(pool, &booking("book:1", at(10, 0), at(11, 0)))
        .await
        .unwrap();
    assert_eq!(first.decision, Decision::Proceed);
    assert!(
        mark_dispatched(pool, "book:1", None, "w")
            .await
            .unwrap()
            .claimed
    );
    complete_effect(pool, "book:1", Outcome::Succeeded, &Completion::default())
        .await
        .unwrap();

    // The agent retried with the time a quarter later, under a new key.
    let shifted = begin_effect(pool, &booking("book:1-retry", at(10, 15), at(11, 15)))
        .await
        .unwrap();
    assert_eq!(shifted.decision, Decision::Overlap);
    assert_eq!(
        shifted.effect_id, first.effect_id,
        "it names the booking in the way"
    );
    assert_eq!(shifted.result.unwrap()["overlaps"], "book:1");
    assert_eq!(
        rig.count("select count(*) from ledger.effects where op_key = 'book:1-retry'")
            .await,
        0
    );
    assert_eq!(
        rig.count("select count(*) from ledger.attempts where kind = 'overlap'")
            .await,
        1,
        "the attempt is kept on the booking it would have doubled"
    );
    // Under the old key, another range is another intent.
    let moved = begin_effect(pool, &booking("book:1", at(12, 0), at(13, 0)))
        .await
        .unwrap();
    assert_eq!(moved.decision, Decision::Rejected);
    // Back to back is not an overlap.
    let next = begin_effect(pool, &booking("book:2", at(11, 0), at(12, 0)))
        .await
        .unwrap();
    assert_eq!(next.decision, Decision::Proceed);

    // Without a range, a booking action cannot be judged.
    let mut no_range = booking("book:3", at(9, 0), at(9, 30));
    no_range.during = None;
    let refused = begin_effect(pool, &no_range).await.unwrap_err();
    assert!(matches!(refused, LedgerError::Invalid(_)), "{refused:?}");
}

#[tokio::test]
async fn an_overlapping_booking_waits_behind_an_open_one_and_no_insert_can_double_book() {
    let rig = Rig::new().await;
    book_by_time(&rig).await;
    let pool = &rig.db.pool;
    let open = begin_effect(pool, &booking("book:A", at(14, 0), at(15, 0)))
        .await
        .unwrap();
    assert_eq!(open.decision, Decision::Proceed);
    let held = begin_effect(pool, &booking("book:B", at(14, 30), at(15, 30)))
        .await
        .unwrap();
    assert_eq!(held.decision, Decision::Held);
    // The held conflicts pane says what time the two contend for.
    let (from, to): (DateTime<Utc>, DateTime<Utc>) = sqlx::query_as(
        "select overlap_from, overlap_to from ledger.held_conflicts where op_key = 'book:B'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!((from, to), (at(14, 30), at(15, 0)));
    let apart = begin_effect(pool, &booking("book:C", at(16, 0), at(17, 0)))
        .await
        .unwrap();
    assert_eq!(
        apart.decision,
        Decision::Proceed,
        "another hour is no conflict"
    );

    // Not even the owner, writing by hand, can put a second booking over the first.
    let forced = sqlx::query(
        "insert into ledger.effects (op_key, action, target, params_hash, requested_by, state,
                                     pending_window, deadline_at, during)
         values ('book:forced', 'booking', 'room:12', 'x', 'hand', 'pending', interval '5 minutes',
                 now() + interval '5 minutes',
                 tstzrange('2027-03-01 14:45+00', '2027-03-01 15:45+00'))",
    )
    .execute(pool)
    .await
    .unwrap_err();
    assert!(
        forced.to_string().contains("effects_no_double_booking"),
        "{forced}"
    );

    // Releasing the held one while the first is open is refused, with why.
    let operator = &rig.operator_pool;
    let early = RELEASE
        .call(
            operator,
            "book:B",
            SeenVersion(rig.effect("book:B").await.version),
            "alice",
            "the guest insists",
        )
        .await
        .unwrap_err();
    match early {
        LedgerError::NotApplicable(message) => {
            assert!(message.contains("still overlaps"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rig.effect("book:B").await.state, State::Held);
    // Once the first is withdrawn, the held one goes ahead by rule.
    CANCEL
        .call(
            operator,
            "book:A",
            SeenVersion(rig.effect("book:A").await.version),
            "alice",
            "the guest cancelled",
        )
        .await
        .unwrap();
    assert_eq!(rig.effect("book:B").await.state, State::Pending);
    rig.audit_intact().await;
}

async fn fail(rig: &Rig, key: &str) {
    complete_effect(
        &rig.db.pool,
        key,
        Outcome::Failed { retryable: false },
        &Completion::default(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_failed_booking_releases_together_every_booking_it_held_that_overlaps_no_open_one() {
    let rig = Rig::new().await;
    book_by_time(&rig).await;
    let pool = &rig.db.pool;
    // A holds the room all morning; B (10–11) and C (12–13) wait behind it
    // and do not overlap each other; D (10:30–11:30) overlaps B.
    assert_eq!(
        begin_effect(pool, &booking("book:A", at(9, 0), at(14, 0)))
            .await
            .unwrap()
            .decision,
        Decision::Proceed
    );
    assert!(
        mark_dispatched(pool, "book:A", None, "w")
            .await
            .unwrap()
            .claimed
    );
    for (key, from, to) in [
        ("book:B", at(10, 0), at(11, 0)),
        ("book:C", at(12, 0), at(13, 0)),
        ("book:D", at(10, 30), at(11, 30)),
    ] {
        assert_eq!(
            begin_effect(pool, &booking(key, from, to))
                .await
                .unwrap()
                .decision,
            Decision::Held,
            "{key}"
        );
    }

    fail(&rig, "book:A").await;

    for key in ["book:B", "book:C"] {
        let released = rig.effect(key).await;
        assert_eq!(
            (released.state, released.held_by),
            (State::Pending, None),
            "{key} overlaps no open booking, so it goes at once"
        );
    }
    assert_eq!(rig.effect("book:D").await.state, State::Held);
    assert_eq!(
        rig.holder_of("book:D").await.as_deref(),
        Some("book:B"),
        "D waits behind the released booking it overlaps, not a failed one"
    );
    let by_rule: Vec<(String, String)> = sqlx::query_as(
        "select action, op_key from ledger.audit_log where operator = 'ledger' order by seq",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(
        by_rule,
        [
            ("release_by_rule".to_string(), "book:B".to_string()),
            ("release_by_rule".to_string(), "book:C".to_string()),
        ]
    );
    assert_eq!(
        rig.count("select count(*) from ledger.holds where closed_at is null")
            .await,
        1,
        "only D's hold is still open, on B"
    );

    // B's call goes ahead and fails too: D goes in turn, C is untouched.
    assert!(
        mark_dispatched(pool, "book:B", None, "w")
            .await
            .unwrap()
            .claimed
    );
    fail(&rig, "book:B").await;
    assert_eq!(rig.effect("book:D").await.state, State::Pending);
    assert_eq!(rig.effect("book:C").await.state, State::Pending);
    assert_eq!(
        rig.count("select count(*) from ledger.held_conflicts")
            .await,
        0
    );
    rig.audit_intact().await;
}

#[tokio::test]
async fn a_booking_held_over_one_that_succeeded_is_left_for_a_person_when_its_holder_fails() {
    let rig = Rig::new().await;
    book_by_time(&rig).await;
    let pool = &rig.db.pool;
    for key in ["book:A", "book:S"] {
        let (from, to) = if key == "book:A" {
            (at(9, 0), at(11, 0))
        } else {
            (at(12, 0), at(13, 0))
        };
        begin_effect(pool, &booking(key, from, to)).await.unwrap();
        assert!(mark_dispatched(pool, key, None, "w").await.unwrap().claimed);
    }
    // E (10–12:30) waits behind A, which is open; it also overlaps S.
    assert_eq!(
        begin_effect(pool, &booking("book:E", at(10, 0), at(12, 30)))
            .await
            .unwrap()
            .decision,
        Decision::Held
    );
    complete_effect(pool, "book:S", Outcome::Succeeded, &Completion::default())
        .await
        .unwrap();
    fail(&rig, "book:A").await;

    assert_eq!(
        rig.effect("book:E").await.state,
        State::Held,
        "releasing E would double-book the room with S"
    );
    assert_eq!(rig.holder_of("book:E").await.as_deref(), Some("book:A"));
    assert_eq!(
        rig.count("select count(*) from ledger.audit_log where operator = 'ledger'")
            .await,
        0
    );
    rig.audit_intact().await;
}
