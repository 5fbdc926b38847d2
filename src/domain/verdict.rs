//! What validation says about a script: the layer that rejected it (if any) and every finding.

use serde::{Deserialize, Serialize};

use crate::domain::script::Language;

/// The validation layers, in the order they run.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Layer {
    Size,
    Syntax,
    Language,
    Secrets,
    Dangerous,
}

impl Layer {
    pub const ALL: [Layer; 5] = [
        Layer::Size,
        Layer::Syntax,
        Layer::Language,
        Layer::Secrets,
        Layer::Dangerous,
    ];

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// `block` findings reject the script; `warn` findings are reported only (unless configured to block).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Severity {
    Block,
    Warn,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One problem found in a script. `line` and `column` are 1-based; the column counts characters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Finding {
    pub layer: Layer,
    pub rule: String,
    pub severity: Severity,
    pub message: String,
    pub line: u32,
    pub column: u32,
}

/// The outcome of validating one script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Verdict {
    pub language: Language,
    pub valid: bool,
    /// The first layer that rejected the script; null when it is valid.
    pub layer: Option<Layer>,
    pub findings: Vec<Finding>,
}

impl Verdict {
    pub fn has_warnings(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Warn)
    }

    /// A one-line summary of why the script was rejected, for error messages.
    pub fn summary(&self) -> String {
        let Some(layer) = self.layer else {
            return "script is valid".to_string();
        };
        let blocking: Vec<&Finding> = self
            .findings
            .iter()
            .filter(|f| f.layer == layer && f.severity == Severity::Block)
            .collect();
        match blocking.first() {
            Some(first) if blocking.len() == 1 => format!(
                "rejected by the {} layer: {} (line {})",
                layer.as_str(),
                first.message,
                first.line
            ),
            Some(first) => format!(
                "rejected by the {} layer: {} (line {}) and {} more",
                layer.as_str(),
                first.message,
                first.line,
                blocking.len() - 1
            ),
            None => format!("rejected by the {} layer", layer.as_str()),
        }
    }
}

/// Maps byte offsets of a text to 1-based (line, character column) positions.
#[derive(Debug)]
pub struct Positions<'a> {
    text: &'a str,
}

impl<'a> Positions<'a> {
    pub fn new(text: &'a str) -> Self {
        Positions { text }
    }

    /// Position of the byte `offset` (clamped to the text and to a char boundary).
    pub fn at(&self, offset: usize) -> (u32, u32) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = self.text[line_start..offset].chars().count() + 1;
        (to_u32(line), to_u32(column))
    }

    /// Position of a tree-sitter point (row, byte column).
    pub fn at_point(&self, row: usize, byte_column: usize) -> (u32, u32) {
        let line_start = self
            .text
            .split_inclusive('\n')
            .take(row)
            .map(str::len)
            .sum::<usize>();
        self.at(line_start + byte_column)
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_characters_not_bytes() {
        let p = Positions::new("ab\nçé x\n");
        assert_eq!(p.at(0), (1, 1));
        assert_eq!(p.at(3), (2, 1));
        // 'x' is at byte 8 (ç and é are two bytes each) but character column 4.
        assert_eq!(p.at(8), (2, 4));
        assert_eq!(p.at_point(1, 5), (2, 4));
        assert_eq!(p.at(1000), (3, 1));
    }
}
