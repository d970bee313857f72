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

/// What a dialog opens on, found from the action's scope: the subject, the
/// sentence saying what will happen, and the keys and stopped-asking items
/// that only some scopes have. Built together so a scope that cannot open
/// (its status already set) gives nothing at all.
struct Opening {
    subject: Subject,
    summary: String,
    names: Option<String>,
    stopped_asking: Vec<(String, i64)>,
}

impl App {
    pub(super) fn open_dialog(&mut self, action: Action) -> Vec<Task> {
        let releases = matches!(action, Action::Verb(verb, _) if *verb == verbs::RELEASE);
        let opening = match action.info().scope {
            Scope::Pane => self.open_on_pane(action, releases),
            Scope::Escalations => self.open_on_escalations(action),
            Scope::Escalation => self.open_on_escalation(action),
            Scope::Effect | Scope::Everywhere | Scope::History => {
                self.open_on_effect(action, releases)
            }
        };
        let Some(Opening {
            subject,
            summary,
            names,
            stopped_asking,
        }) = opening
        else {
            return Vec::new();
        };
        let required_suffix = self.required_suffix(action, &subject);
        let fields = fields_of(
            action,
            required_suffix.is_some(),
            !stopped_asking.is_empty(),
        );
        // The items whose agents stopped asking matter more than what the
        // action would say otherwise: releasing them sends them to Overdue.
        let note =
            stopped_asking_note(&subject, &stopped_asking).or_else(|| self.action_note(action));
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

    /// Every item of the pane on screen, if the rows shown are the ones the
    /// action would touch.
    fn open_on_pane(&mut self, action: Action, releases: bool) -> Option<Opening> {
        let info = action.info();
        if let Some(why) = self.why_not_every_item(action) {
            self.set_status(format!("cannot {}: {why}", info.label), Role::Warn);
            return None;
        }
        let targets: Vec<(String, i64)> = self.models[self.view]
            .rows
            .iter()
            .filter_map(|row| Some((row.op_key.clone()?, row.version?)))
            .collect();
        if targets.is_empty() || self.detail.is_some() {
            self.set_status("nothing to act on in this view", Role::Muted);
            return None;
        }
        let items = format!(
            "{} of {}{}{}",
            crate::format::count_of(targets.len(), "item", "items"),
            self.current_view().title(),
            self.matching_filter(),
            self.pane_split()
        );
        let keys: Vec<&str> = targets.iter().map(|(key, _)| key.as_str()).collect();
        let names = Some(super::a_few_keys(&keys));
        let stopped_asking = if releases {
            targets
                .iter()
                .filter(|(op_key, _)| self.stopped_asking.contains(op_key))
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        Some(Opening {
            subject: Subject::Pane { targets },
            summary: every_item_says(action, items),
            names,
            stopped_asking,
        })
    }

    /// Every open escalation in view 5, once the filter's rows are read.
    fn open_on_escalations(&mut self, action: Action) -> Option<Opening> {
        let info = action.info();
        if self.current_view() != View::Escalations || self.detail.is_some() {
            self.set_status("every escalation: in view 5", Role::Muted);
            return None;
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
            return None;
        }
        let escalation_keys: Vec<String> = self.models[View::Escalations]
            .rows
            .iter()
            .filter(|row| !row.id.starts_with(APPROVAL_ROW))
            .map(|row| row.id.clone())
            .collect();
        if escalation_keys.is_empty() {
            self.set_status("no open escalation in this view", Role::Muted);
            return None;
        }
        let items = format!(
            "{}{}{}",
            crate::format::count_of(escalation_keys.len(), "escalation", "escalations"),
            self.matching_filter(),
            self.pane_split()
        );
        let names = Some(super::a_few_keys(&escalation_keys));
        Some(Opening {
            subject: Subject::Escalations { escalation_keys },
            summary: every_item_says(action, items),
            names,
            stopped_asking: Vec::new(),
        })
    }

    /// The selected escalation (an approval request's row is not one).
    fn open_on_escalation(&mut self, action: Action) -> Option<Opening> {
        let Some(row) = self.selected_row().filter(|row| {
            self.current_view() == View::Escalations && !row.id.starts_with(APPROVAL_ROW)
        }) else {
            self.set_status("select an escalation first (view 5)", Role::Muted);
            return None;
        };
        let summary = format!(
            "{} {}",
            action.info().description,
            crate::text::sanitize_line(&row.id)
        );
        let escalation_key = row.id.clone();
        Some(Opening {
            subject: Subject::Escalation { escalation_key },
            summary,
            names: None,
            stopped_asking: Vec::new(),
        })
    }

    /// The selected effect, at the version the console saw.
    fn open_on_effect(&mut self, action: Action, releases: bool) -> Option<Opening> {
        let Some((op_key, seen)) = self.selected_effect() else {
            self.set_status("select an effect first", Role::Muted);
            return None;
        };
        let summary = format!(
            "{} — {}{}",
            action.info().description,
            crate::text::sanitize_line(&op_key),
            self.selected_context()
        );
        let stopped_asking = if releases && self.stopped_asking.contains(&op_key) {
            vec![(op_key.clone(), seen)]
        } else {
            Vec::new()
        };
        let seen = Some(seen);
        Some(Opening {
            subject: Subject::Effect { op_key, seen },
            summary,
            names: None,
            stopped_asking,
        })
    }

    /// The filter, as a bulk summary mentions it.
    fn matching_filter(&self) -> String {
        if self.filter.is_empty() {
            String::new()
        } else {
            format!(" matching {:?}", self.filter_text)
        }
    }

    /// The key's last characters the operator must type, if any.
    fn required_suffix(&self, action: Action, subject: &Subject) -> Option<String> {
        // One rule: what moves money asks for the key's last characters,
        // nothing else does. Resolving moves money only when the effect has
        // an amount; a compensation and its approval always do.
        let moves_money = match action.money() {
            Money::Always => true,
            Money::WhenItHasAnAmount => self.selected_amount().is_some(),
            Money::Never => false,
        };
        match subject {
            Subject::Effect { op_key, .. } if moves_money => Some(key_suffix(op_key)),
            _ => None,
        }
    }

    /// What the action leads to that its summary does not say.
    fn action_note(&self, action: Action) -> Option<(String, Role)> {
        match action {
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
        }
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
            KeyCode::Esc => return self.back_out_of_dialog(),
            KeyCode::Tab | KeyCode::Down => dialog.focus = field_after(&fields, dialog.focus),
            KeyCode::BackTab | KeyCode::Up => dialog.focus = field_before(&fields, dialog.focus),
            // The arrows move to the button on that side; pressed twice they
            // stay there rather than toggling back.
            KeyCode::Left if dialog.focus == DialogField::Buttons => {
                dialog.confirm_selected = false;
            }
            KeyCode::Right if dialog.focus == DialogField::Buttons => {
                dialog.confirm_selected = true;
            }
            KeyCode::Enter => return self.on_dialog_enter(&fields),
            _ if dialog_text(dialog).is_some() => {
                if let Some(text) = dialog_text(dialog) {
                    edit_line(text, key, 500);
                }
            }
            KeyCode::Char(ch) => on_dialog_char(dialog, ch),
            _ => {}
        }
        Vec::new()
    }

    fn back_out_of_dialog(&mut self) -> Vec<Task> {
        self.mode = Mode::Browse;
        self.set_status("backed out: nothing written", Role::Muted);
        Vec::new()
    }

    /// Enter moves on from a field, backs out on Back, and on Confirm
    /// submits a valid form or says what is missing.
    fn on_dialog_enter(&mut self, fields: &[DialogField]) -> Vec<Task> {
        let Mode::Dialog(dialog) = &mut self.mode else {
            return Vec::new();
        };
        if dialog.focus != DialogField::Buttons {
            // Enter in a field moves on, and in the last one submits a
            // valid form: it never lands on Back, where a second Enter
            // would throw the typed text away.
            let next = field_after(fields, dialog.focus);
            if next != DialogField::Buttons {
                dialog.focus = next;
                return Vec::new();
            }
        } else if !dialog.confirm_selected {
            return self.back_out_of_dialog();
        }
        if let Err(problem) = validate_dialog(dialog) {
            dialog.error = Some(problem);
            return Vec::new();
        }
        self.submit_dialog()
    }

    /// Closes the dialog and turns its answers into the settling requests.
    fn submit_dialog(&mut self) -> Vec<Task> {
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
        match dialog.action.request(dialog.subject, answers) {
            Some(request) => vec![Task::Settle(request)],
            None => {
                self.set_status(format!("{what}: does not apply here"), Role::Warn);
                Vec::new()
            }
        }
    }
}

/// A bulk dialog's summary: a verb done to every item says it in its own
/// words (only such a verb has a key on a pane, `runs`); anything else
/// just counts the items.
fn every_item_says(action: Action, items: String) -> String {
    match action {
        Action::Verb(verb, _) => match &verb.every_item {
            Some(every_item) => (every_item.says)(verb.name, &items),
            None => items,
        },
        _ => items,
    }
}

/// Of a release, what happens to the items whose agents stopped asking;
/// nothing when there are none.
fn stopped_asking_note(
    subject: &Subject,
    stopped_asking: &[(String, i64)],
) -> Option<(String, Role)> {
    match subject {
        _ if stopped_asking.is_empty() => None,
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
    }
}

/// The field after `focus`, wrapping from the buttons to the first.
fn field_after(fields: &[DialogField], focus: DialogField) -> DialogField {
    let at = fields.iter().position(|f| *f == focus).unwrap_or(0);
    fields[(at + 1) % fields.len()]
}

/// The field before `focus`, wrapping from the first to the buttons.
fn field_before(fields: &[DialogField], focus: DialogField) -> DialogField {
    let at = fields.iter().position(|f| *f == focus).unwrap_or(0);
    fields[(at + fields.len() - 1) % fields.len()]
}

/// A typed character outside a text field: it sets a yes/no choice, or on
/// the buttons picks Confirm or Back.
fn on_dialog_char(dialog: &mut Dialog, ch: char) {
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

/// The dialog's title and the status line's word: the description up to its colon.
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
