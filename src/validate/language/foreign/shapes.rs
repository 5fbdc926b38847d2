//! Whole-line shapes of Julia, HCL, Fortran, MATLAB, Tcl, Rake, Scala, Lua, GDScript, Solidity and
//! AppleScript (research, infrastructure, data-platform, game and desktop code saved as a `.py` or
//! `.sh` file), counted like the other languages' in `foreign`.

/// Julia: `using LinearAlgebra, Printf`, a `function` with typed parameters (`A::Matrix`), a
/// macro call (`@printf(…)`), `println(…)`, a loop over a range without Python's `:` or Bash's `do`
/// (`for i in 1:n`).
pub(super) fn julia(l: &str) -> bool {
    let module = |w: &str| {
        w.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '.')
    };
    let range_loop = l.strip_prefix("for ").is_some_and(|rest| {
        rest.split_once(" in ").is_some_and(|(_, range)| {
            let range = range.trim();
            !range.ends_with(':')
                && !range.ends_with("do")
                && range.split_once(':').is_some_and(|(a, b)| {
                    !a.is_empty() && a.bytes().all(|c| c.is_ascii_digit()) && !b.is_empty()
                })
        })
    });
    l.strip_prefix("using ")
        .is_some_and(|rest| rest.split(',').all(|w| module(w.trim())))
        || (l.starts_with("function ") && l.contains("::"))
        // (`function lorenz!(du, u, p, t)`: a name that ends in `!`, Julia's mutating functions)
        || (l.starts_with("function ") && l.contains("!(") && l.ends_with(')'))
        || [
            "@printf(",
            "@show ",
            "@time ",
            "@assert ",
            "@info ",
            "@sprintf(",
        ]
        .iter()
        .any(|m| l.starts_with(m))
        || l.starts_with("println(")
        || range_loop
}

/// Fortran: `implicit none`, `program heat`/`end program`, declarations with `::`
/// (`real(8), allocatable :: u(:)`), list-directed output (`print *, x`, `write(*,*) x`).
pub(super) fn fortran(l: &str) -> bool {
    let lower = l.to_ascii_lowercase();
    let declaration = lower.split_once("::").is_some_and(|(ty, _)| {
        [
            "integer",
            "real",
            "double precision",
            "character",
            "logical",
            "complex",
            "type(",
        ]
        .iter()
        .any(|t| ty.trim_start().starts_with(t))
    });
    lower == "implicit none"
        || lower.starts_with("end program")
        || lower.starts_with("end subroutine")
        || lower.starts_with("print *,")
        || lower.starts_with("write(*,*)")
        || lower.starts_with("write (*,*)")
        || declaration
}

/// MATLAB/Octave: a function with named outputs (`function [m, s] = stats(x)`, `function y =
/// f(x)`), output calls closed by `;` (`fprintf('%d\n', n);`, `disp(x);`), matrix literals with
/// `;` rows (`A = [1 2; 3 4];`).
pub(super) fn matlab(l: &str) -> bool {
    let named_outputs = l.strip_prefix("function ").is_some_and(|rest| {
        rest.split_once(" = ").is_some_and(|(out, call)| {
            (out.starts_with('[') && out.ends_with(']')
                || out.chars().all(|c| c.is_alphanumeric() || c == '_'))
                && call.contains('(')
        })
    });
    let matrix = l.ends_with("];")
        && l.split_once(" = [")
            .is_some_and(|(_, m)| m.contains(';') && !m.contains(','));
    named_outputs
        || (l.ends_with(");") && (l.starts_with("fprintf(") || l.starts_with("disp(")))
        || matrix
}

/// Tcl: `proc name {args} {`, `foreach x $items {`, `set n [expr {…}]`.
pub(super) fn tcl(l: &str) -> bool {
    (l.starts_with("proc ") && l.ends_with('{') && l.contains(" {"))
        || (l.starts_with("foreach ") && l.ends_with('{'))
        // (`for {set i 0} {$i < $n} {incr i} {`, `if {$r > 2.0} {`, `while {[gets $f line] >= 0} {`)
        || (["for {", "if {", "while {", "} elseif {"]
            .iter()
            .any(|k| l.starts_with(k))
            && l.ends_with("} {"))
        || (l.starts_with("set ") && l.contains(" [") && l.ends_with(']'))
}

/// HCL (Terraform, Packer, Nomad): a block opened by a keyword and its quoted labels
/// (`resource "aws_s3_bucket" "logs" {`, `variable "region" {`, `terraform {`).
pub(super) fn hcl_block(l: &str) -> bool {
    let Some(head) = l.strip_suffix('{') else {
        return false;
    };
    let mut words = head.split_whitespace();
    let Some(keyword) = words.next() else {
        return false;
    };
    let labels: Vec<&str> = words.collect();
    match keyword {
        "terraform" | "locals" | "required_providers" => labels.is_empty(),
        "resource" | "data" => {
            labels.len() == 2
                && labels
                    .iter()
                    .all(|w| w.len() > 2 && w.starts_with('"') && w.ends_with('"'))
        }
        "variable" | "output" | "provider" | "module" | "source" | "build" | "job" => {
            labels.len() == 1
                && labels[0].len() > 2
                && labels[0].starts_with('"')
                && labels[0].ends_with('"')
        }
        _ => false,
    }
}

/// Ruby's Rake tasks: `namespace :db do`, `task cleanup: :environment do`, `task :default do`,
/// `desc "Remove …"`. Python has no `do` block and Bash no word ending in `:` before one.
pub(super) fn rake(l: &str) -> bool {
    let block = |rest: &str| rest.ends_with(" do") && rest.contains(':');
    l.strip_prefix("namespace :")
        .is_some_and(|rest| rest.ends_with(" do"))
        || l.strip_prefix("task ").is_some_and(block)
        || l.strip_prefix("desc \"")
            .is_some_and(|rest| rest.ends_with('"'))
}

/// Scala: `object DailyRollup {`, `def main(args: Array[String]): Unit = {` (a typed definition
/// whose body follows `= {`), `val events = spark.read…` (a binding keyword, a name, then `=` or a
/// type), `case class Event(…)`.
pub(super) fn scala(l: &str) -> bool {
    let mut words = l.split_whitespace();
    let first = words.next().unwrap_or("");
    let second = words.next().unwrap_or("");
    let third = words.next().unwrap_or("");
    let identifier = |w: &str| {
        w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    (first == "object" && identifier(second) && l.ends_with('{'))
        || (first == "def" && l.contains("): ") && l.ends_with("= {"))
        || (matches!(first, "val" | "lazy")
            && (identifier(second) && third == "="
                || second.ends_with(':') && identifier(second.trim_end_matches(':'))))
        || l.starts_with("case class ") && l.contains('(')
}

/// Lua (game mods, editor and server scripting): `local function f(x)`, a callback closed by
/// `end)`, `if x then` / `for k, v in pairs(t) do` without Bash's `;` before the keyword,
/// `elseif`.
pub(super) fn lua(l: &str) -> bool {
    let header = |keyword: &str, rest: &str| {
        l.strip_prefix(keyword)
            .is_some_and(|body| body.ends_with(rest) && !body.contains(';') && !body.contains('['))
    };
    l.starts_with("local function ")
        || l == "end)"
        || l.starts_with("elseif ") && l.ends_with(" then")
        || header("if ", " then")
        || header("for ", " do") && (l.contains(" = ") || l.contains("pairs("))
}

/// Godot's GDScript, which reads like Python but is not: `extends Node2D`, `@export var speed:
/// float = 180.0`, `@onready var …`, `func _ready():`, `var velocity = …`.
pub(super) fn gdscript(l: &str) -> bool {
    let mut words = l.split_whitespace();
    let first = words.next().unwrap_or("");
    let second = words.next().unwrap_or("");
    (first == "extends"
        && words.next().is_none()
        && second.starts_with(|c: char| c.is_ascii_uppercase())
        && second
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_'))
        || (matches!(first, "@export" | "@onready" | "@export_range" | "@tool")
            && l.contains("var "))
        || (first == "func" && l.contains('(') && l.ends_with(':'))
        || (first == "var"
            && !l.ends_with(';')
            && (l.contains(" = ") || l.contains(": "))
            && !second.is_empty()
            && second != "=")
}

/// Solidity: `pragma solidity ^0.8.24;`, `contract GuildGold is ERC20, Ownable {`, functions with
/// a visibility (`function mint(address to) external onlyOwner {`), `mapping(…)`, `emit …;`.
pub(super) fn solidity(l: &str) -> bool {
    l.starts_with("pragma solidity ")
        || (l.starts_with("contract ") || l.starts_with("interface ") || l.starts_with("library "))
            && l.ends_with('{')
        || l.starts_with("function ")
            && l.split_once(')').is_some_and(|(_, after)| {
                [
                    " public",
                    " external",
                    " internal",
                    " private",
                    " view",
                    " pure",
                ]
                .iter()
                .any(|v| after.contains(v))
            })
        || l.starts_with("mapping(")
        || l.starts_with("emit ") && l.ends_with(");")
}

/// AppleScript (macOS automation): `tell application "Finder"`, `end tell`/`end if`/`end repeat`,
/// `display dialog …`, `set answer to …`.
pub(super) fn applescript(l: &str) -> bool {
    l.starts_with("tell application \"")
        || matches!(l, "end tell" | "end if" | "end repeat" | "end try")
        || l.starts_with("display dialog ")
        || l.starts_with("display notification ")
        || l.starts_with("set ") && l.contains(" to ") && !l.contains('=') && !l.contains('$')
}

#[cfg(test)]
mod tests {
    use super::{applescript, gdscript, lua, rake, scala, solidity};

    #[test]
    fn rake_and_scala_lines() {
        for l in [
            "namespace :cleanup do",
            "task abandoned_carts: :environment do",
            "desc \"Remove old carts\"",
        ] {
            assert!(rake(l), "{l}");
        }
        for l in [
            "object DailyRollup {",
            "def main(args: Array[String]): Unit = {",
            "val spark = SparkSession.builder.getOrCreate()",
            "val n: Long = 3",
            "case class Event(ts: Long, kind: String)",
        ] {
            assert!(scala(l), "{l}");
        }
        // Python and Bash lines of the same start
        for l in [
            "val = 3",
            "val == 3",
            "task = queue.get()",
            "desc = \"x\"",
            "def main(args):",
            "object = {}",
        ] {
            assert!(!rake(l) && !scala(l), "{l}");
        }
    }

    #[test]
    fn game_contract_and_desktop_lines() {
        for l in [
            "local function fmt_time(ticks)",
            "end)",
            "if not force.valid then",
            "for _, p in pairs(game.players) do",
            "elseif n > 3 then",
        ] {
            assert!(lua(l), "{l}");
        }
        for l in [
            "extends CharacterBody2D",
            "@export var speed: float = 180.0",
            "func _physics_process(delta):",
            "var direction = Input.get_axis(\"a\", \"b\")",
        ] {
            assert!(gdscript(l), "{l}");
        }
        for l in [
            "pragma solidity ^0.8.24;",
            "contract GuildGold is ERC20, Ownable {",
            "function mint(address to, uint256 amount) external onlyOwner {",
        ] {
            assert!(solidity(l), "{l}");
        }
        for l in [
            "tell application \"System Events\" to restart",
            "end if",
            "display dialog \"Restart?\"",
            "set userChoice to button returned of (x)",
        ] {
            assert!(applescript(l), "{l}");
        }
        // Python and Bash lines of the same start
        for l in [
            "if [ -f x ]; then",
            "for i in 1 2 3; do",
            "for f in \"${files[@]}\"; do",
            "set -euo pipefail",
            "set -- a b",
            "var = 3",
            "extends = []",
            "function deploy() {",
            "function f { echo public; }",
        ] {
            assert!(
                !lua(l) && !gdscript(l) && !solidity(l) && !applescript(l),
                "{l}"
            );
        }
    }
}
