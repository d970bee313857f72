//! Every verb an operator writes to the ledger with, described once: its
//! name on the command line and in the audit trail, its help, what it acts
//! on, what it asks, whether it moves money, the SQL function it ends in
//! and how it is carried out. The CLI's subcommands, the console's dialogs
//! and [`Settler::settle`] are made from this table; the console adds only
//! the keys and where a verb shows in its key bar. A new verb is a row here
//! and its SQL function.

use std::hash::{Hash, Hasher};

use super::{Request, Running, Settler, compensate, escalate, reconcile};
use crate::ledger::actions::{self, OperatorCall};

/// What a verb acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum On {
    /// An effect, by its operation key, at the version the operator saw.
    Effect,
    /// An escalation, by its key (`escalate:<op_key>:<decision>`).
    Escalation,
}

/// What a verb asks besides its subject, in the order it asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// A provider record the verb acts on: `--ref REF`.
    Reference,
    /// How the effect ended: `--succeeded REF` (the provider's reference)
    /// or `--failed [--retryable]`; the console has a key for each.
    Outcome,
    /// Where a person is reached: `--to SINK`; the console uses the
    /// configured one.
    Sink,
    /// Why, written in the audit trail: `--reason` (or `--note`).
    Reason,
}

/// Whether confirming a verb moves money: then the operator types the
/// last characters of the key, whatever the tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Money {
    Never,
    Always,
    /// Settling an effect by hand moves money when the effect has an amount.
    WhenItHasAnAmount,
}

/// How an effect settled by hand ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Succeeded,
    Failed,
}

/// What a verb is about, as the operator picked it.
#[derive(Debug, Clone, PartialEq)]
pub enum Subject {
    /// An effect and the version the operator saw (`None`: the current one).
    Effect {
        op_key: String,
        seen: Option<i64>,
    },
    /// Every effect of a (filtered) pane, each with the version seen.
    Pane {
        targets: Vec<(String, i64)>,
    },
    Escalation {
        escalation_key: String,
    },
    /// Every escalation the (filtered) escalations view lists.
    Escalations {
        escalation_keys: Vec<String>,
    },
}

/// What the operator gave, trimmed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answers {
    pub reason: String,
    /// A provider's reference: the record to act on, or the evidence of success.
    pub reference: String,
    pub outcome: Option<Outcome>,
    /// Failed: the same key may be dispatched again.
    pub retryable: bool,
    /// `None`: the only sink configured.
    pub sink: Option<String>,
}

impl Answers {
    /// A reason, and nothing else.
    pub fn because(reason: impl Into<String>) -> Answers {
        Answers {
            reason: reason.into(),
            ..Answers::default()
        }
    }
}

/// A verb done to every item of a (filtered) pane, each in its own
/// transaction.
#[derive(Debug)]
pub struct EveryItem {
    /// The console's help line.
    pub summary: &'static str,
    /// What will happen, given the verb's name and "3 items of Held conflicts …".
    pub says: fn(&str, &str) -> String,
}

/// Where a verb's subcommand comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cli {
    /// Made from the row.
    Made,
    /// Written by hand, because it is more than the verb: `reconcile` is
    /// the reconciler service too.
    Own,
}

pub struct Verb {
    /// The subcommand (`effectwatch release`, `effectwatch escalation resolve`).
    pub name: &'static str,
    pub on: On,
    /// The subcommand's help line.
    pub about: &'static str,
    /// The console's help line; its words up to a colon title the dialog.
    pub summary: &'static str,
    pub fields: &'static [Field],
    pub money: Money,
    /// The SQL function it ends in; `ledger.op_<rule>` is ruled on by
    /// `ledger.refusals` under that rule's name.
    pub function: &'static str,
    pub every_item: Option<EveryItem>,
    pub cli: Cli,
    pub runs: Runs,
}

/// How a verb is carried out, given a request that fits it.
pub enum Runs {
    /// An operator call of the common shape, on one effect or every item
    /// of a pane: its SQL function, nothing else.
    Call(&'static OperatorCall),
    /// The settling machinery around its SQL function: a provider asked or
    /// sent a compensation, a sink told.
    With(for<'a> fn(&'a Settler, &'a Request) -> Running<'a>),
}

impl std::fmt::Debug for Verb {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.on {
            On::Effect => write!(formatter, "Verb({})", self.name),
            On::Escalation => write!(formatter, "Verb(escalation {})", self.name),
        }
    }
}

/// A verb is its name and what it acts on.
impl PartialEq for Verb {
    fn eq(&self, other: &Verb) -> bool {
        self.name == other.name && self.on == other.on
    }
}

impl Eq for Verb {}

impl Hash for Verb {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.on.hash(state);
    }
}

impl Verb {
    /// Its name in `ledger.refusals`, when its function is an operator call.
    pub fn rule(&self) -> Option<&'static str> {
        self.function.strip_prefix("ledger.op_")
    }

    pub fn asks(&self, field: Field) -> bool {
        self.fields.contains(&field)
    }

    /// The request for this subject and these answers, when they fit the
    /// verb: what it acts on, a pane (or every escalation) only for a verb
    /// done to every item, and an outcome for one that asks it.
    pub fn request(&'static self, subject: Subject, answers: Answers) -> Option<Request> {
        let request = Request {
            verb: self,
            subject,
            answers,
        };
        request.fits().then_some(request)
    }

    /// Whether this subject is one the verb acts on.
    pub(super) fn acts_on(&self, subject: &Subject) -> bool {
        match subject {
            Subject::Effect { .. } => self.on == On::Effect,
            Subject::Escalation { .. } => self.on == On::Escalation,
            Subject::Pane { .. } => self.on == On::Effect && self.every_item.is_some(),
            Subject::Escalations { .. } => self.on == On::Escalation && self.every_item.is_some(),
        }
    }
}

/// Every verb, in the order the command line lists them.
pub const VERBS: &[&Verb] = &[
    &RECONCILE,
    &COMPENSATE,
    &REVERSE_DUPLICATE,
    &SEND_COMPENSATION,
    &ESCALATE,
    &RESOLVE,
    &RELEASE,
    &CANCEL,
    &ANNOTATE,
    &ACKNOWLEDGE_DUPLICATES,
    &REOPEN_DUPLICATES,
    &APPROVE,
    &REJECT,
    &ACKNOWLEDGE_ESCALATION,
    &RESOLVE_ESCALATION,
];

/// An audited write a person makes that is not done to an effect or an
/// escalation: the ledger's rules, the approvals it checks, retention.
/// Each has a subcommand of its own, since what it asks is more than a
/// verb's (a policy's settings, an approval's terms, a retention plan),
/// which takes its help line from here; listed beside [`VERBS`] so that
/// every audited write a person makes is in this file, which
/// `tests/contract_vocabulary.rs` holds to the database's functions.
#[derive(Debug, PartialEq, Eq)]
pub struct LedgerWrite {
    /// The subcommand's words (`policy set`).
    pub command: &'static str,
    pub about: &'static str,
    /// The SQL function it ends in, in one transaction with its audit entry.
    pub function: &'static str,
    /// The database role that may call it.
    pub role: &'static str,
}

/// Every audited write of the ledger's own rules and records.
pub const LEDGER_WRITES: &[&LedgerWrite] = &[
    &SET_POLICY,
    &SET_UNKNOWN_ACTIONS,
    &GRANT_APPROVAL,
    &REVOKE_APPROVAL,
    &PRUNE,
];

pub const SET_POLICY: LedgerWrite = LedgerWrite {
    command: "policy set",
    about: "Change one action's policy; what is not given stays as it is.",
    function: "ledger.op_set_policy",
    role: "effect_operator",
};

pub const SET_UNKNOWN_ACTIONS: LedgerWrite = LedgerWrite {
    command: "policy set --unknown-actions",
    about: "Ledger-wide: refuse effects of an action that has no policy of its own, or allow \
            them under the defaults.",
    function: "ledger.op_set_unknown_actions",
    role: "effect_operator",
};

pub const GRANT_APPROVAL: LedgerWrite = LedgerWrite {
    command: "approval grant",
    about: "Record what an approval authorises: one action on one target, until it expires.",
    function: "ledger.grant_approval",
    role: "effect_approver",
};

pub const REVOKE_APPROVAL: LedgerWrite = LedgerWrite {
    command: "approval revoke",
    about: "Withdraw an approval: effects not yet dispatched under it stop.",
    function: "ledger.revoke_approval",
    role: "effect_approver",
};

pub const PRUNE: LedgerWrite = LedgerWrite {
    command: "prune",
    about: "Remove old settled effects nothing protects, exporting them first (ledger owner \
            only).",
    function: "ledger.prune_settled",
    role: "the ledger's owner",
};

/// The verb of this name acting on this.
pub fn named(on: On, name: &str) -> Option<&'static Verb> {
    VERBS
        .iter()
        .copied()
        .find(|verb| verb.on == on && verb.name == name)
}

pub const RECONCILE: Verb = Verb {
    name: "reconcile",
    on: On::Effect,
    about: "Ask the provider what exists for an effect (or every item of a pane) and record \
            the finding.",
    summary: "reconcile: ask the provider what exists for this key",
    fields: &[],
    money: Money::Never,
    function: "ledger.record_reconciliation",
    every_item: Some(EveryItem {
        summary: "reconcile every item of this (filtered) pane",
        says: |_, items| format!("Ask the provider about {items}, one after the other."),
    }),
    cli: Cli::Own,
    runs: Runs::With(reconcile::run),
};

pub const COMPENSATE: Verb = Verb {
    name: "compensate",
    on: On::Effect,
    about: "Reverse a succeeded effect with a compensation under its own key (above the \
            action's limit, a second operator must approve).",
    summary: "compensate: reverse it with a new, linked effect",
    fields: &[Field::Reason],
    money: Money::Always,
    function: "ledger.op_compensate",
    every_item: None,
    cli: Cli::Made,
    runs: Runs::With(compensate::run),
};

pub const REVERSE_DUPLICATE: Verb = Verb {
    name: "reverse-duplicate",
    on: On::Effect,
    about: "Reverse one extra provider record of an effect the provider holds twice (the \
            effect stands; above the action's limit, a second operator must approve).",
    summary: "reverse one extra provider record; the effect stands",
    fields: &[Field::Reference, Field::Reason],
    money: Money::Always,
    function: "ledger.op_reverse_duplicate",
    every_item: None,
    cli: Cli::Made,
    runs: Runs::With(compensate::reverse_duplicate),
};

pub const SEND_COMPENSATION: Verb = Verb {
    name: "send-compensation",
    on: On::Effect,
    about: "Send a compensation that exists and was never sent (its sender died before \
            the dispatch, or it was approved and the approver's console closed); the key \
            is the compensation's.",
    summary: "send a compensation that was never sent",
    fields: &[Field::Reason],
    money: Money::Always,
    function: "ledger.op_dispatch_compensation",
    every_item: None,
    cli: Cli::Made,
    runs: Runs::With(compensate::send),
};

pub const ESCALATE: Verb = Verb {
    name: "escalate",
    on: On::Effect,
    about: "Hand an effect to a person through a sink: the decision needed, the key, the \
            entry, the evidence.",
    summary: "escalate to a person (the configured sink)",
    fields: &[Field::Sink, Field::Reason],
    money: Money::Never,
    function: "ledger.op_escalate",
    every_item: Some(EveryItem {
        summary: "escalate every item of this (filtered) pane to a person",
        says: |_, items| {
            format!(
                "Escalate {items} to a person, through the configured sink. One escalation \
                 and one audit entry each; an item already escalated is not sent twice, one \
                 changed since is skipped."
            )
        },
    }),
    cli: Cli::Made,
    runs: Runs::With(escalate::run),
};

pub const RESOLVE: Verb = Verb {
    name: "resolve",
    on: On::Effect,
    about: "Settle an effect by hand, with evidence: --succeeded REF, or --failed.",
    summary: "resolve by hand, with evidence",
    fields: &[Field::Outcome, Field::Reason],
    money: Money::WhenItHasAnAmount,
    function: "ledger.op_resolve",
    every_item: None,
    cli: Cli::Made,
    runs: Runs::With(super::resolve),
};

pub const RELEASE: Verb = calls(
    &actions::RELEASE,
    "Let a held effect go ahead.",
    "release a hold: the held effect may be dispatched",
    Some("release every held item of this (filtered) pane"),
);

pub const CANCEL: Verb = calls(
    &actions::CANCEL,
    "Withdraw a held or never-dispatched effect.",
    "cancel a hold or an undispatched effect",
    Some("cancel every item of this (filtered) pane that was never sent"),
);

pub const ANNOTATE: Verb = calls(
    &actions::ANNOTATE,
    "Put a note on the record (--reason is the note).",
    "annotate: a note in the audit trail",
    Some("annotate every item of this (filtered) pane"),
);

pub const ACKNOWLEDGE_DUPLICATES: Verb = calls(
    &actions::ACKNOWLEDGE_DUPLICATES,
    "Take a key's repeated and flagged calls off the duplicates pane (they stay in its \
        history and the reports).",
    "acknowledge repeats: off this pane, kept in history",
    Some("acknowledge the repeats of every item of this (filtered) pane"),
);

pub const REOPEN_DUPLICATES: Verb = calls(
    &actions::REOPEN_DUPLICATES,
    "Put a key's acknowledged repeated calls back on the duplicates pane (an \
        acknowledgement made by mistake, or a bulk clear that reached too far).",
    "reopen repeats: back on the duplicates pane",
    None,
);

pub const APPROVE: Verb = Verb {
    name: "approve",
    on: On::Effect,
    about: "Approve a compensation another operator requested; it is sent at once.",
    summary: "approve a compensation awaiting a second operator",
    fields: &[Field::Reason],
    money: Money::Always,
    function: "ledger.op_approve_compensation",
    every_item: None,
    cli: Cli::Made,
    runs: Runs::With(compensate::approve),
};

pub const REJECT: Verb = Verb {
    name: "reject",
    on: On::Effect,
    about: "Turn down a compensation request (the requester may withdraw their own).",
    summary: "reject a compensation awaiting approval",
    fields: &[Field::Reason],
    money: Money::Never,
    function: "ledger.op_reject_compensation",
    every_item: None,
    cli: Cli::Made,
    runs: Runs::With(compensate::reject),
};

pub const ACKNOWLEDGE_ESCALATION: Verb = Verb {
    name: "acknowledge",
    on: On::Escalation,
    about: "A person has it: delivery stops, it stays open (or every open escalation, \
            --pane escalations).",
    summary: "acknowledge an escalation",
    fields: &[Field::Reason],
    money: Money::Never,
    function: "ledger.op_acknowledge_escalation",
    every_item: Some(EveryItem {
        summary: "acknowledge every escalation of this (filtered) view",
        says: |name, items| {
            format!(
                "{name} {items}: delivery stops, each stays open. One transaction and one audit \
                 entry each, and its sink told; one acknowledged or resolved since is skipped."
            )
        },
    }),
    cli: Cli::Made,
    runs: Runs::With(escalate::acknowledge),
};

pub const RESOLVE_ESCALATION: Verb = Verb {
    name: "resolve",
    on: On::Escalation,
    about: "The decision was taken: close it (or every open escalation, --pane escalations).",
    summary: "resolve an escalation (close the loop)",
    fields: &[Field::Reason],
    money: Money::Never,
    function: "ledger.op_resolve_escalation",
    every_item: Some(EveryItem {
        summary: "resolve every escalation of this (filtered) view (close the loop)",
        says: |name, items| {
            format!(
                "{name} {items}: each is closed. One transaction and one audit entry each, and \
                 its sink told; one resolved since is skipped."
            )
        },
    }),
    cli: Cli::Made,
    runs: Runs::With(escalate::resolve),
};

/// A verb of the common shape: an operator call on an effect, asking a
/// reason and moving no money; done to every item of a pane when it has a
/// help line for that.
const fn calls(
    call: &'static OperatorCall,
    about: &'static str,
    summary: &'static str,
    every_item: Option<&'static str>,
) -> Verb {
    Verb {
        name: call.name,
        on: On::Effect,
        about,
        summary,
        fields: &[Field::Reason],
        money: Money::Never,
        function: call.function(),
        every_item: match every_item {
            Some(summary) => Some(EveryItem {
                summary,
                says: each_on_its_own,
            }),
            None => None,
        },
        cli: Cli::Made,
        runs: Runs::Call(call),
    }
}

fn each_on_its_own(name: &str, items: &str) -> String {
    format!(
        "{name} {items}. One transaction and one audit entry each; an item changed since, or \
         to which it no longer applies, is skipped."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_verb_is_named_once_for_what_it_acts_on() {
        for verb in VERBS {
            assert_eq!(named(verb.on, verb.name), Some(*verb));
            let same = VERBS.iter().filter(|other| **other == *verb).count();
            assert_eq!(same, 1, "{verb:?}");
        }
    }

    #[test]
    fn a_verb_makes_a_request_only_for_what_it_acts_on() {
        let effect = || Subject::Effect {
            op_key: "k".into(),
            seen: Some(2),
        };
        let pane = || Subject::Pane {
            targets: vec![("k".into(), 2)],
        };
        let escalation = || Subject::Escalation {
            escalation_key: "escalate:k:decide".into(),
        };
        let escalations = || Subject::Escalations {
            escalation_keys: vec!["escalate:k:decide".into()],
        };
        let answers = || Answers {
            reason: "why".into(),
            outcome: Some(Outcome::Failed),
            ..Answers::default()
        };
        for verb in VERBS {
            let on_effect = verb.request(effect(), answers()).is_some();
            let on_escalation = verb.request(escalation(), answers()).is_some();
            let on_pane = verb.request(pane(), answers()).is_some();
            let on_escalations = verb.request(escalations(), answers()).is_some();
            let every = verb.every_item.is_some();
            assert_eq!(on_effect, verb.on == On::Effect, "{verb:?}");
            assert_eq!(on_escalation, verb.on == On::Escalation, "{verb:?}");
            assert_eq!(on_pane, every && verb.on == On::Effect, "{verb:?}");
            assert_eq!(
                on_escalations,
                every && verb.on == On::Escalation,
                "{verb:?}"
            );
        }
        assert_eq!(
            RESOLVE.request(effect(), Answers::default()),
            None,
            "resolve needs an outcome"
        );
        assert_eq!(
            REVERSE_DUPLICATE.request(
                effect(),
                Answers {
                    reference: "fx_2".into(),
                    reason: "paid twice".into(),
                    ..Answers::default()
                }
            ),
            Some(Request {
                verb: &REVERSE_DUPLICATE,
                subject: effect(),
                answers: Answers {
                    reference: "fx_2".into(),
                    reason: "paid twice".into(),
                    ..Answers::default()
                }
            })
        );
    }
}
