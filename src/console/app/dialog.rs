//! The confirmation dialog of a writing action: it opens on the selection,
//! collects what the action's row asks for, and turns into the settling
//! request.

use crossterm::event::{KeyCode, KeyEvent};
use std::collections::BTreeMap;

use super::{App, Mode, Task, View, model::APPROVAL_ROW, prompt::edit_line};
use crate::console::action::{Action, Answers, DialogField, Money, Scope, Subject, Use};
use crate::console::theme::Role;
use crate::ledger::actions::Applicability;
use crate::settle::verbs::{self, Outcome};

#[derive(Debug, Clone, PartialEq)]
pub struct Dialog {
    pub action: Action,
    pub title: String,
    /// What will happen, in a sentence.
    pub summary: String,
    pub subject: Subject,
    /// Of an action on every item of a pane: the first keys it will touch
    /// and how many more, so the count is of rows the operator recognises.
    pub names: Option<String>,
    pub reason: String,
    pub external_ref: String,
    pub key_suffix: String,
    /// For resolve as failed: the same key may be dispatched again.
    pub retryable: bool,
    /// What the operator must type to prove they read the key.
    pub required_suffix: Option<String>,
    pub focus: DialogField,
    /// The default button is Back.
    pub confirm_selected: bool,
    pub error: Option<String>,
    /// What confirming will lead to that the summary does not say (a
    /// compensation above the approval limit waits for a second operator).
    pub note: Option<(String, Role)>,
    /// Of a release: the held items whose agents have not asked for them
    /// within their pending window (released, they would go to Overdue
    /// undispatched), which the operator may cancel instead.
    pub stopped_asking: Vec<(String, i64)>,
    /// Cancel those instead of releasing them; the others are released.
    pub cancel_instead: bool,
}

impl App {
    pub(super) fn open_dialog(&mut self, action: Action) -> Vec<Task> {
        let info = action.info();
        let mut names = None;
        let releases = matches!(action, Action::Verb(verb, _) if *verb == verbs::RELEASE);
        let mut stopped_asking = Vec::new();
        let (subject, summary) = match info.scope {
            Scope::Pane => {
                if let Some(why) = self.why_not_every_item(action) {
                    self.set_status(format!("cannot {}: {why}", info.label), Role::Warn);
                    return Vec::new();
                }
                let targets: Vec<(String, i64)> = self.models[self.view]
                    .rows
                    .iter()
                    .filter_map(|row| Some((row.op_key.clone()?, row.version?)))
                    .collect();
                if targets.is_empty() || self.detail.is_some() {
                    self.set_status("nothing to act on in this view", Role::Muted);
                    return Vec::new();
                }
                let filtered = if self.filter.is_empty() {
                    String::new()
                } else {
                    format!(" matching {:?}", self.filter_text)
                };
                let items = format!(
                    "{} of {}{filtered}{}",
                    crate::format::count_of(targets.len(), "item", "items"),
                    self.current_view().title(),
                    self.pane_split()
                );
                // Only a verb done to every item has a key on a pane (`runs`).
                let every_item = match action {
                    Action::Verb(verb, _) => verb.every_item.as_ref().map(|every| (verb, every)),
                    _ => None,
                };
                let summary = match every_item {
                    Some((verb, every_item)) => (every_item.says)(verb.name, &items),
                    None => items,
                };
                let keys: Vec<&str> = targets.iter().map(|(key, _)| key.as_str()).collect();
                names = Some(super::a_few_keys(&keys));
                if releases {
                    stopped_asking = targets
                        .iter()
                        .filter(|(op_key, _)| self.stopped_asking.contains(op_key))
                        .cloned()
                        .collect();
                }
                (Subject::Pane { targets }, summary)
            }
            Scope::Escalations => {
                if self.current_view() != View::Escalations || self.detail.is_some() {
                    self.set_status("every escalation: in view 5", Role::Muted);
                    return Vec::new();
                }
                if !self.pane_rows_match_filter() {
                    self.set_status(
                        format!(
                            "cannot {}: the escalations matching {:?} are still being read; {} \
                             again once they show",
                            info.label, self.filter_text, info.keys
                        ),
                        Role::Warn,
                    );
                    return Vec::new();
                }
                let escalation_keys: Vec<String> = self.models[View::Escalations]
                    .rows
                    .iter()
                    .filter(|row| !row.id.starts_with(APPROVAL_ROW))
                    .map(|row| row.id.clone())
                    .collect();
                if escalation_keys.is_empty() {
                    self.set_status("no open escalation in this view", Role::Muted);
                    return Vec::new();
                }
                let filtered = if self.filter.is_empty() {
                    String::new()
                } else {
                    format!(" matching {:?}", self.filter_text)
                };
                let items = format!(
                    "{}{filtered}{}",
                    crate::format::count_of(escalation_keys.len(), "escalation", "escalations"),
                    self.pane_split()
                );
                let summary = match action {
                    Action::Verb(verb, _) => match &verb.every_item {
                        Some(every_item) => (every_item.says)(verb.name, &items),
                        None => items,
                    },
                    _ => items,
                };
                names = Some(super::a_few_keys(&escalation_keys));
                (Subject::Escalations { escalation_keys }, summary)
            }
            Scope::Escalation => {
                let Some(row) = self.selected_row().filter(|row| {
                    self.current_view() == View::Escalations && !row.id.starts_with(APPROVAL_ROW)
                }) else {
                    self.set_status("select an escalation first (view 5)", Role::Muted);
                    return Vec::new();
                };
                let summary = format!(
                    "{} {}",
                    info.description,
                    crate::text::sanitize_line(&row.id)
                );
                let escalation_key = row.id.clone();
                (Subject::Escalation { escalation_key }, summary)
            }
            Scope::Effect | Scope::Everywhere | Scope::History => {
                let Some((op_key, seen)) = self.selected_effect() else {
                    self.set_status("select an effect first", Role::Muted);
                    return Vec::new();
                };
                let summary = format!(
                    "{} — {}{}",
                    info.description,
                    crate::text::sanitize_line(&op_key),
                    self.selected_context()
                );
                if releases && self.stopped_asking.contains(&op_key) {
                    stopped_asking = vec![(op_key.clone(), seen)];
                }
                let seen = Some(seen);
                (Subject::Effect { op_key, seen }, summary)
            }
        };
        // One rule: what moves money asks for the key's last characters,
        // nothing else does. Resolving moves money only when the effect has
        // an amount; a compensation and its approval always do.
        let moves_money = match action.money() {
            Money::Always => true,
            Money::WhenItHasAnAmount => self.selected_amount().is_some(),
            Money::Never => false,
        };
        let required_suffix = match &subject {
            Subject::Effect { op_key, .. } if moves_money => Some(key_suffix(op_key)),
            _ => None,
        };
        let fields = fields_of(
            action,
            required_suffix.is_some(),
            !stopped_asking.is_empty(),
        );
        let note = match action {
            Action::Verb(verb, _) if *verb == verbs::COMPENSATE => {
                self.selected_applicability().map(approval_note)
            }
            Action::Verb(verb, _) if *verb == verbs::APPROVE => self.approval_summary(),
            Action::Verb(_, Use::As(Outcome::Succeeded)) if self.selected_never_dispatched() => {
                Some((
                    "never dispatched (○ prepared): the ledger has no record that the provider was called. \
                     Resolve it as succeeded only with the provider's evidence, in the reason and the reference."
                        .to_string(),
                    Role::Warn,
                ))
            }
            _ => None,
        };
        let note = match &subject {
            _ if stopped_asking.is_empty() => note,
            Subject::Effect { .. } => Some((
                "its agent has not asked for it within its pending window: released, it goes to \
                 Overdue undispatched unless the agent asks again"
                    .to_string(),
                Role::Warn,
            )),
            _ => Some((
                format!(
                    "{} of these: their agents have not asked for them within their \
                     pending window; released, they go to Overdue undispatched",
                    stopped_asking.len()
                ),
                Role::Warn,
            )),
        };
        self.mode = Mode::Dialog(Box::new(Dialog {
            action,
            title: action_title(action).to_string(),
            summary,
            subject,
            names,
            reason: String::new(),
            external_ref: String::new(),
            key_suffix: String::new(),
            retryable: false,
            required_suffix,
            focus: fields[0],
            confirm_selected: false,
            error: None,
            note,
            stopped_asking,
            cancel_instead: false,
        }));
        Vec::new()
    }

    pub(super) fn on_dialog_key(&mut self, key: KeyEvent) -> Vec<Task> {
        let Mode::Dialog(dialog) = &mut self.mode else {
            return Vec::new();
        };
        let fields = fields_of(
            dialog.action,
            dialog.required_suffix.is_some(),
            !dialog.stopped_asking.is_empty(),
        );
        match key.code {
            KeyCode::Esc => {
                self.mode = Mode::Browse;
                self.set_status("backed out: nothing written", Role::Muted);
                return Vec::new();
            }
            KeyCode::Tab | KeyCode::Down => {
                let at = fields.iter().position(|f| *f == dialog.focus).unwrap_or(0);
                dialog.focus = fields[(at + 1) % fields.len()];
            }
            KeyCode::BackTab | KeyCode::Up => {
                let at = fields.iter().position(|f| *f == dialog.focus).unwrap_or(0);
                dialog.focus = fields[(at + fields.len() - 1) % fields.len()];
            }
            // The arrows move to the button on that side; pressed twice they
            // stay there rather than toggling back.
            KeyCode::Left if dialog.focus == DialogField::Buttons => {
                dialog.confirm_selected = false;
            }
            KeyCode::Right if dialog.focus == DialogField::Buttons => {
                dialog.confirm_selected = true;
            }
            KeyCode::Enter => {
                if dialog.focus != DialogField::Buttons {
                    // Enter in a field moves on, and in the last one submits a
                    // valid form: it never lands on Back, where a second Enter
                    // would throw the typed text away.
                    let at = fields.iter().position(|f| *f == dialog.focus).unwrap_or(0);
                    let next = fields[(at + 1) % fields.len()];
                    if next != DialogField::Buttons {
                        dialog.focus = next;
                        return Vec::new();
                    }
                } else if !dialog.confirm_selected {
                    self.mode = Mode::Browse;
                    self.set_status("backed out: nothing written", Role::Muted);
                    return Vec::new();
                }
                if let Err(problem) = validate_dialog(dialog) {
                    dialog.error = Some(problem);
                    return Vec::new();
                }
                let Mode::Dialog(dialog) = std::mem::take(&mut self.mode) else {
                    return Vec::new();
                };
                let what = action_title(dialog.action);
                self.set_status(
                    match &dialog.subject {
                        Subject::Pane { targets } => format!("… {what}: {} effects", targets.len()),
                        Subject::Escalations { escalation_keys } => {
                            format!("… {what}: {} escalations", escalation_keys.len())
                        }
                        _ => format!("… {what}"),
                    },
                    Role::Muted,
                );
                let answers = Answers {
                    reason: dialog.reason.trim().to_string(),
                    reference: dialog.external_ref.trim().to_string(),
                    retryable: dialog.retryable,
                    ..Answers::default()
                };
                if dialog.cancel_instead && !dialog.stopped_asking.is_empty() {
                    return cancel_instead(*dialog, answers);
                }
                return match dialog.action.request(dialog.subject, answers) {
                    Some(request) => vec![Task::Settle(request)],
                    None => {
                        self.set_status(format!("{what}: does not apply here"), Role::Warn);
                        Vec::new()
                    }
                };
            }
            _ if dialog_text(dialog).is_some() => {
                if let Some(text) = dialog_text(dialog) {
                    edit_line(text, key, 500);
                }
            }
            KeyCode::Char(ch) => {
                let toggled = match dialog.focus {
                    DialogField::Retryable => Some(&mut dialog.retryable),
                    DialogField::CancelInstead => Some(&mut dialog.cancel_instead),
                    _ => None,
                };
                if let Some(toggled) = toggled {
                    match ch {
                        ' ' => *toggled = !*toggled,
                        'y' | 'Y' => *toggled = true,
                        'n' | 'N' => *toggled = false,
                        _ => {}
                    }
                } else if dialog.focus == DialogField::Buttons {
                    match ch {
                        'y' | 'Y' => dialog.confirm_selected = true,
                        'n' | 'N' => dialog.confirm_selected = false,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        Vec::new()
    }
}

impl App {
    /// Why a key for every item of the view cannot run now: the rows on
    /// screen are not the ones it would act on. A new filter's rows are
    /// read after it is applied, and the previous filter's stay on screen
    /// meanwhile; the items of an action on many are read again after it,
    /// at versions the console does not know until then.
    fn why_not_every_item(&self, action: Action) -> Option<String> {
        let View::Pane(pane) = self.current_view() else {
            return None;
        };
        let key = action.info().keys;
        if !self.pane_rows_match_filter() {
            let title = pane.title().to_lowercase();
            let which = if self.filter.is_empty() {
                format!("the unfiltered {title}")
            } else {
                format!("the {title} matching {:?}", self.filter_text)
            };
            return Some(format!(
                "{which} are still being read; {key} again once they show"
            ));
        }
        let rows = &self.models[self.view].rows;
        let awaiting = rows
            .iter()
            .filter_map(|row| row.op_key.as_deref())
            .filter(|op_key| self.awaiting_read(op_key).is_some())
            .count();
        (awaiting > 0).then(|| {
            format!(
                "{awaiting} of these changed with your last action; {key} again once the next read shows them"
            )
        })
    }

    /// How the items of the view split, for a bulk dialog: by mismatch in
    /// the duplicates pane, by the holder's state in the held pane, by
    /// state among the escalations.
    fn pane_split(&self) -> String {
        let model = &self.models[self.view];
        let column = |title: &str| model.columns.iter().position(|c| c.title == title);
        let mut groups = BTreeMap::<String, usize>::new();
        if let Some(index) = column("needs") {
            for row in &model.rows {
                let why = row.cells.get(index).map_or("", |cell| cell.text.as_str());
                let group = if why == crate::console::model::REPLAYS_ONLY {
                    why.to_string()
                } else if why.contains("mismatch") {
                    "with a mismatch".to_string()
                } else {
                    // The first reason says which kind of look it needs.
                    why.split(", ").next().unwrap_or(why).to_string()
                };
                *groups.entry(group).or_default() += 1;
            }
        } else if let Some(index) = column("holder") {
            for row in &model.rows {
                let state = row.cells.get(index).map_or("?", |cell| cell.text.as_str());
                *groups.entry(format!("holder {state}")).or_default() += 1;
            }
        } else if self.view == View::Escalations
            && let Some(index) = column("state")
        {
            for row in model
                .rows
                .iter()
                .filter(|row| !row.id.starts_with(APPROVAL_ROW))
            {
                // The state's word, without its symbol.
                let state = row.cells.get(index).map_or("?", |cell| cell.text.as_str());
                let word = state.rsplit(' ').next().unwrap_or(state);
                *groups.entry(word.to_string()).or_default() += 1;
            }
        }
        if groups.is_empty() {
            return String::new();
        }
        let parts: Vec<String> = groups
            .iter()
            .map(|(group, n)| format!("{n} {group}"))
            .collect();
        format!(": {}", parts.join(", "))
    }

    /// What a second operator approves, said in the dialog: the amount and
    /// currency, the original effect, who asked and why, the approval limit.
    fn approval_summary(&self) -> Option<(String, Role)> {
        let id = &self.selected_row()?.id;
        let request_id = id.strip_prefix(crate::console::model::APPROVAL_ROW)?;
        let row = self
            .snapshot
            .as_ref()?
            .approvals
            .iter()
            .find(|row| row.request_id.to_string() == request_id)?;
        let money = crate::format::optional_money(row.amount_minor, row.currency.as_deref());
        let limit = self
            .snapshot
            .as_ref()
            .and_then(|snapshot| snapshot.applicability.get(&row.op_key))
            .and_then(|applicability| applicability.approval_limit_minor)
            .map(|minor| match row.currency.as_deref() {
                Some(currency) => crate::format::money(minor, currency),
                None => format!("{minor} (minor units)"),
            })
            .unwrap_or_else(|| "none".into());
        Some((
            format!(
                "approves a compensation of {money} reversing {} on {}, asked by {} because \u{201c}{}\u{201d}; approval limit {limit}. It is sent at once.",
                crate::text::sanitize_line(&row.op_key),
                crate::text::sanitize_line(&row.target),
                crate::text::sanitize_line(&row.requested_by),
                crate::text::sanitize_line(&row.reason),
            ),
            Role::Warn,
        ))
    }
}

/// The dialog's fields: the action's, with the key's last characters asked
/// before the buttons exactly when the action moves money, and the choice
/// to cancel instead when a release has items whose agents stopped asking.
fn fields_of(action: Action, asks_key: bool, offers_cancel: bool) -> Vec<DialogField> {
    let mut fields = action.dialog_fields();
    let buttons = fields.len().saturating_sub(1);
    if asks_key {
        fields.insert(buttons, DialogField::KeySuffix);
    }
    if offers_cancel {
        fields.insert(buttons, DialogField::CancelInstead);
    }
    fields
}

/// A release with cancel chosen for the items whose agents stopped asking:
/// those cancelled, the others released, each its own request.
fn cancel_instead(dialog: Dialog, answers: Answers) -> Vec<Task> {
    let stopped = dialog.stopped_asking;
    let (cancel, release) = match dialog.subject {
        Subject::Pane { targets } => {
            let rest: Vec<(String, i64)> = targets
                .into_iter()
                .filter(|target| !stopped.contains(target))
                .collect();
            (
                verbs::CANCEL.request(Subject::Pane { targets: stopped }, answers.clone()),
                (!rest.is_empty())
                    .then(|| verbs::RELEASE.request(Subject::Pane { targets: rest }, answers))
                    .flatten(),
            )
        }
        subject @ Subject::Effect { .. } => (verbs::CANCEL.request(subject, answers), None),
        Subject::Escalation { .. } | Subject::Escalations { .. } => (None, None),
    };
    cancel
        .into_iter()
        .chain(release)
        .map(Task::Settle)
        .collect()
}

/// The dialog's title and the status line's word: the description up to its colon.
/// Whether a compensation goes out at once or waits for a second
/// operator, as the ledger will decide it.
fn approval_note(applicability: &Applicability) -> (String, Role) {
    let limit = |minor: i64| match applicability.currency.as_deref() {
        Some(currency) => crate::format::money(minor, currency),
        None => format!("{minor} (minor units)"),
    };
    match applicability.approval_limit_minor {
        Some(minor) if applicability.compensation_waits_for_approval => (
            format!(
                "above the approval limit of {}: a second operator must approve; nothing is sent until then",
                limit(minor)
            ),
            Role::Warn,
        ),
        Some(minor) => (
            format!(
                "within the approval limit of {}: the compensation is sent at once",
                limit(minor)
            ),
            Role::Muted,
        ),
        None => (
            "no approval limit for this action: the compensation is sent at once".to_string(),
            Role::Muted,
        ),
    }
}

fn action_title(action: Action) -> &'static str {
    let description = action.info().description;
    description.split(':').next().unwrap_or(description)
}

fn dialog_text(dialog: &mut Dialog) -> Option<&mut String> {
    match dialog.focus {
        DialogField::Reason => Some(&mut dialog.reason),
        DialogField::ExternalRef => Some(&mut dialog.external_ref),
        DialogField::KeySuffix => Some(&mut dialog.key_suffix),
        DialogField::Retryable | DialogField::CancelInstead | DialogField::Buttons => None,
    }
}

fn validate_dialog(dialog: &Dialog) -> Result<(), String> {
    let fields = dialog.action.dialog_fields();
    if fields.contains(&DialogField::Reason) && dialog.reason.trim().is_empty() {
        return Err("a reason is required".to_string());
    }
    if fields.contains(&DialogField::ExternalRef) && dialog.external_ref.trim().is_empty() {
        return Err("the provider's external reference is required".to_string());
    }
    if let Some(required) = &dialog.required_suffix
        && dialog.key_suffix.trim() != required
    {
        return Err(format!("type {required:?} (the end of the key) to confirm"));
    }
    Ok(())
}

/// What an operator types to confirm a money move: the key's last
/// segment, ignoring a version suffix (`refund:INV-402:AP-91:v1` asks for
/// `AP-91`), since almost every key ends in the same `:v1`.
pub fn key_suffix(op_key: &str) -> String {
    let clean = crate::text::sanitize_line(op_key);
    let segments: Vec<&str> = clean.split(':').filter(|s| !s.is_empty()).collect();
    let is_version = |s: &str| {
        let digits = s.trim_start_matches(['v', 'V']);
        s.len() < 5 && !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
    };
    let segment = segments
        .iter()
        .rev()
        .find(|s| !is_version(s))
        .copied()
        .unwrap_or(&clean);
    let chars: Vec<char> = segment.chars().collect();
    let take = chars.len().clamp(1, 8).min(chars.len());
    chars[chars.len() - take..].iter().collect()
}

#[cfg(test)]
mod tests {
    use super::key_suffix;

    #[test]
    fn the_confirmation_skips_the_version_suffix() {
        assert_eq!(key_suffix("refund:INV-402:AP-91:v1"), "AP-91");
        assert_eq!(key_suffix("compensate:refund:INV-9:a:1"), "a");
        assert_eq!(key_suffix("webhook:evt_1Q8xK2LmNp"), "8xK2LmNp");
        assert_eq!(key_suffix("plain"), "plain");
    }
}
