//! Themes: colours named by role, loaded from TOML. The built-in themes are
//! the files in `themes/`, compiled in, so a fresh binary has them all.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

use ratatui::style::{Color, Modifier, Style};
use serde::Deserialize;

pub const BUILT_IN: [(&str, &str); 4] = [
    ("dark", include_str!("../../themes/dark.toml")),
    ("light", include_str!("../../themes/light.toml")),
    (
        "high-contrast",
        include_str!("../../themes/high-contrast.toml"),
    ),
    (
        "colour-blind",
        include_str!("../../themes/colour-blind.toml"),
    ),
];

/// The roles a view may ask for. Each role has a colour; meaning is also
/// carried by a symbol or word wherever a role is used.
#[derive(Debug, Clone, PartialEq)]
pub struct Theme {
    pub name: String,
    pub text: Color,
    pub background: Color,
    pub muted: Color,
    pub accent: Color,
    pub ok: Color,
    pub warn: Color,
    pub critical: Color,
    pub selection_fg: Color,
    pub selection_bg: Color,
    pub border: Color,
    pub header_fg: Color,
    pub header_bg: Color,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ThemeFile {
    name: Option<String>,
    #[serde(default)]
    colors: BTreeMap<String, toml::Spanned<String>>,
}

impl Default for Theme {
    fn default() -> Self {
        Theme::built_in("dark").expect("the dark theme is compiled in and valid")
    }
}

impl Theme {
    /// The built-in theme after `current` (a name), in the order they are
    /// listed; the first after a theme from a file.
    pub fn next_built_in(current: &str) -> &'static str {
        let at = BUILT_IN.iter().position(|(name, _)| *name == current);
        BUILT_IN[at.map_or(0, |at| (at + 1) % BUILT_IN.len())].0
    }

    pub fn built_in(name: &str) -> Option<Theme> {
        BUILT_IN
            .iter()
            .find(|(built_in, _)| *built_in == name)
            .map(|(_, text)| Theme::parse(name, text).expect("built-in themes are tested"))
    }

    /// A built-in name, or a path to a TOML file.
    pub fn load(name_or_path: &str) -> Result<Theme, String> {
        if let Some(theme) = Theme::built_in(name_or_path) {
            return Ok(theme);
        }
        let path = Path::new(name_or_path);
        if !path.exists() {
            let names: Vec<&str> = BUILT_IN.iter().map(|(name, _)| *name).collect();
            return Err(format!(
                "no theme {name_or_path:?}: use one of {} or a path to a .toml file",
                names.join(", ")
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read theme {}: {error}", path.display()))?;
        Theme::parse(&path.display().to_string(), &text)
    }

    /// Starts from the dark theme, so a file may override only some roles.
    /// Errors name the file, line and field.
    pub fn parse(origin: &str, text: &str) -> Result<Theme, String> {
        let file: ThemeFile = toml::from_str(text).map_err(|error| {
            format!(
                "theme {origin}: {}",
                crate::text::one_line_toml_error(text, &error)
            )
        })?;
        let mut theme = if origin == "dark" {
            dark_fallback()
        } else {
            Theme::default()
        };
        theme.name = file.name.unwrap_or_else(|| origin.to_string());
        for (role, value) in &file.colors {
            let line = text[..value.span().start].matches('\n').count() + 1;
            let color = Color::from_str(value.get_ref()).map_err(|_| {
                format!(
                    "theme {origin}: line {line}, field colors.{role}: {:?} is not a colour (use a name like \"red\" or \"#rrggbb\")",
                    value.get_ref()
                )
            })?;
            let slot = match role.as_str() {
                "text" => &mut theme.text,
                "background" => &mut theme.background,
                "muted" => &mut theme.muted,
                "accent" => &mut theme.accent,
                "ok" => &mut theme.ok,
                "warn" => &mut theme.warn,
                "critical" => &mut theme.critical,
                "selection_fg" => &mut theme.selection_fg,
                "selection_bg" => &mut theme.selection_bg,
                "border" => &mut theme.border,
                "header_fg" => &mut theme.header_fg,
                "header_bg" => &mut theme.header_bg,
                other => {
                    return Err(format!(
                        "theme {origin}: line {line}, field colors.{other}: unknown colour role"
                    ));
                }
            };
            *slot = color;
        }
        Ok(theme)
    }

    pub fn base(&self) -> Style {
        Style::default().fg(self.text).bg(self.background)
    }

    pub fn role(&self, role: Role) -> Style {
        let base = self.base();
        match role {
            Role::Text => base,
            Role::Muted => base.fg(self.muted),
            Role::Accent => base.fg(self.accent),
            Role::Ok => base.fg(self.ok),
            Role::Warn => base.fg(self.warn),
            Role::Critical => base.fg(self.critical).add_modifier(Modifier::BOLD),
        }
    }

    pub fn selection(&self) -> Style {
        Style::default()
            .fg(self.selection_fg)
            .bg(self.selection_bg)
            .add_modifier(Modifier::BOLD)
    }

    pub fn header(&self) -> Style {
        Style::default().fg(self.header_fg).bg(self.header_bg)
    }

    pub fn border(&self) -> Style {
        Style::default().fg(self.border).bg(self.background)
    }
}

/// The dark theme's values before its file is read, so parsing "dark"
/// itself does not recurse through `Theme::default`.
fn dark_fallback() -> Theme {
    Theme {
        name: "dark".into(),
        text: Color::Gray,
        background: Color::Reset,
        muted: Color::DarkGray,
        accent: Color::Cyan,
        ok: Color::Green,
        warn: Color::Yellow,
        critical: Color::Red,
        selection_fg: Color::Black,
        selection_bg: Color::Cyan,
        border: Color::DarkGray,
        header_fg: Color::White,
        header_bg: Color::Black,
    }
}

/// What a piece of text means, which picks its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Text,
    Muted,
    Accent,
    Ok,
    Warn,
    Critical,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_theme_parses() {
        for (name, text) in BUILT_IN {
            let theme = Theme::parse(name, text).unwrap();
            assert_eq!(theme.name, name);
        }
    }

    #[test]
    fn a_partial_theme_overrides_only_its_roles() {
        let theme = Theme::parse("mine.toml", "[colors]\nok = \"blue\"\n").unwrap();
        assert_eq!(theme.ok, Color::Blue);
        assert_eq!(theme.critical, Theme::default().critical);
    }

    #[test]
    fn a_bad_colour_names_file_line_and_field() {
        let error = Theme::parse(
            "mine.toml",
            "name = \"x\"\n[colors]\nok = \"blue\"\nwarn = \"orangeish\"\n",
        )
        .unwrap_err();
        assert!(
            error.contains("mine.toml")
                && error.contains("line 4")
                && error.contains("colors.warn"),
            "{error}"
        );
        let error = Theme::parse("mine.toml", "[colors]\nsparkle = \"red\"\n").unwrap_err();
        assert!(error.contains("colors.sparkle"), "{error}");
        let error = Theme::parse("mine.toml", "[colors\n").unwrap_err();
        assert!(error.contains("line 1"), "{error}");
    }
}
