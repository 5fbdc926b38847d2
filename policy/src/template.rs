//! Rule messages: `{path}`-style templates parsed once and rendered only when someone reads them.

use std::fmt;

use crate::model::Section;

/// A value a message can name. Each section allows the ones its decisions know about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    /// The file's path (file rules).
    Path,
    /// The file operation: `read`, `write`… (file rules).
    Operation,
    /// The program as executed (command rules).
    Command,
    /// The arguments after the program, joined by spaces (command rules).
    Args,
    /// The domain, else the address (network rules).
    Domain,
    /// The remote address (network rules).
    Ip,
    /// The remote port (network rules).
    Port,
    /// The validation rule id (validation rules).
    Rule,
}

impl Placeholder {
    pub fn name(self) -> &'static str {
        match self {
            Placeholder::Path => "path",
            Placeholder::Operation => "operation",
            Placeholder::Command => "command",
            Placeholder::Args => "args",
            Placeholder::Domain => "domain",
            Placeholder::Ip => "ip",
            Placeholder::Port => "port",
            Placeholder::Rule => "rule",
        }
    }

    /// The placeholders a section's messages may use.
    pub fn allowed(section: Section) -> &'static [Placeholder] {
        match section {
            Section::File => &[Placeholder::Path, Placeholder::Operation],
            Section::Command => &[Placeholder::Command, Placeholder::Args],
            Section::Network => &[Placeholder::Domain, Placeholder::Ip, Placeholder::Port],
            Section::Validation => &[Placeholder::Rule],
        }
    }
}

/// Why a message template does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unclosed `{{` (write `{{{{` for a brace)")]
    Unclosed,
    #[error("`}}` without `{{` (write `}}}}` for a brace)")]
    Stray,
    #[error("unknown placeholder `{{{name}}}`: {section} messages may use {allowed}")]
    Unknown {
        name: String,
        section: &'static str,
        allowed: String,
    },
}

/// What a placeholder renders from: the operation a decision was about.
pub trait Subject {
    /// Writes the value of `placeholder` (placeholders the section does not allow never reach
    /// here: templates are checked when compiled).
    fn write_placeholder(
        &self,
        placeholder: Placeholder,
        out: &mut fmt::Formatter<'_>,
    ) -> fmt::Result;
}

#[derive(Debug, Clone)]
pub(crate) struct Template {
    parts: Box<[Part]>,
}

#[derive(Debug, Clone)]
enum Part {
    Text(Box<str>),
    Var(Placeholder),
}

impl Template {
    pub(crate) fn parse(source: &str, section: Section) -> Result<Template, TemplateError> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut rest = source;
        while let Some(i) = rest.find(['{', '}']) {
            text.push_str(&rest[..i]);
            let tail = &rest[i..];
            if let Some(after) = tail.strip_prefix("{{").or_else(|| tail.strip_prefix("}}")) {
                text.push_str(&tail[..1]);
                rest = after;
                continue;
            }
            if tail.starts_with('}') {
                return Err(TemplateError::Stray);
            }
            let end = tail.find('}').ok_or(TemplateError::Unclosed)?;
            let name = &tail[1..end];
            let var = Placeholder::allowed(section)
                .iter()
                .copied()
                .find(|p| p.name() == name)
                .ok_or_else(|| TemplateError::Unknown {
                    name: name.to_string(),
                    section: section.key(),
                    allowed: Placeholder::allowed(section)
                        .iter()
                        .map(|p| format!("{{{}}}", p.name()))
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
            if !text.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut text).into()));
            }
            parts.push(Part::Var(var));
            rest = &tail[end + 1..];
        }
        text.push_str(rest);
        if !text.is_empty() {
            parts.push(Part::Text(text.into()));
        }
        Ok(Template {
            parts: parts.into(),
        })
    }

    pub(crate) fn render(
        &self,
        subject: &dyn Subject,
        out: &mut fmt::Formatter<'_>,
    ) -> fmt::Result {
        for part in &self.parts {
            match part {
                Part::Text(t) => out.write_str(t)?,
                Part::Var(p) => subject.write_placeholder(*p, out)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;

    impl Subject for Fixed {
        fn write_placeholder(&self, p: Placeholder, out: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(out, "<{}>", p.name())
        }
    }

    struct Shown<'a>(&'a Template);

    impl fmt::Display for Shown<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.0.render(&Fixed, f)
        }
    }

    #[test]
    fn placeholders_render_and_braces_escape() {
        let t = Template::parse("{operation} of {path} {{denied}}", Section::File).expect("parses");
        assert_eq!(Shown(&t).to_string(), "<operation> of <path> {denied}");
        let t = Template::parse("no placeholders", Section::Network).expect("parses");
        assert_eq!(Shown(&t).to_string(), "no placeholders");
    }

    #[test]
    fn unknown_or_foreign_placeholders_and_stray_braces_are_refused() {
        let err = Template::parse("{domain}", Section::File).expect_err("foreign");
        assert_eq!(
            err.to_string(),
            "unknown placeholder `{domain}`: file_rules messages may use {path}, {operation}"
        );
        assert_eq!(
            Template::parse("{path", Section::File).expect_err("unclosed"),
            TemplateError::Unclosed
        );
        assert_eq!(
            Template::parse("a } b", Section::File).expect_err("stray"),
            TemplateError::Stray
        );
    }
}
