//! Scripts in a language scriptgate does not run (JavaScript, Ruby, PHP, Perl, Go, Rust, C, Java,
//! C#, PowerShell, SQL, Lua, R, Julia, HCL, Fortran, MATLAB, Tcl, Scala, Solidity, GDScript,
//! AppleScript…), told apart by their shebang or by lines only that language writes.
//!
//! Each marker is a shape of a whole line that neither Python nor Bash produces in working code
//! (`console.log(…);`, `my $x = …;`, `#include <…>`, `puts "…"`), grouped per language. A few are
//! decisive on their own (a `<?php` tag, `package main`, `#include <…>`); the rest need two lines
//! of the same language, so a stray line in a real Python or Bash script is not enough.

mod shapes;

use shapes::{
    applescript, fortran, gdscript, hcl_block, julia, lua, matlab, rake, scala, solidity, tcl,
};

/// A third language found in `text`: how many of its lines were seen, and whether one of them (or
/// the shebang) settles it alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Foreign {
    pub(super) name: &'static str,
    pub(super) lines: usize,
    pub(super) decisive: bool,
}

/// The interpreter a shebang names, when it is a third language.
pub(super) fn shebang(text: &str) -> Option<&'static str> {
    let first = text.lines().next()?.strip_prefix("#!")?;
    let mut words = first.split_whitespace();
    let mut prog = words.next()?.rsplit('/').next()?;
    if prog == "env" {
        prog = words.find(|w| !w.starts_with('-'))?;
    }
    let prog = prog.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    Some(match prog {
        "node" | "nodejs" | "deno" | "bun" | "ts-node" | "tsx" => "JavaScript",
        "ruby" | "irb" => "Ruby",
        "perl" => "Perl",
        "php" => "PHP",
        "pwsh" | "powershell" => "PowerShell",
        "lua" | "luajit" => "Lua",
        "Rscript" => "R",
        "tclsh" | "wish" => "Tcl",
        "osascript" => "AppleScript",
        _ => return None,
    })
}

/// A line no Python or Bash script writes, and that settles the language by itself.
pub(super) fn decisive(l: &str) -> Option<&'static str> {
    let name = if l.starts_with("<?php") {
        "PHP"
    } else if l.eq_ignore_ascii_case("@echo off") {
        "Batch"
    } else if l.starts_with(".PHONY:") {
        "Makefile"
    } else if l.starts_with("# syntax=docker/dockerfile") || dockerfile_from(l) {
        "Dockerfile"
    } else if l.starts_with("pragma solidity ") {
        "Solidity"
    } else if l == "package main" || l.starts_with("func main()") {
        "Go"
    } else if l.starts_with("#include <") || l.starts_with("#include \"") {
        "C"
    } else if l.starts_with("fn main()") {
        "Rust"
    } else if l.contains("public static void main(") {
        "Java"
    } else if l.starts_with("using System;") || l.contains("static void Main(") {
        "C#"
    } else if l == "use strict;" || l == "use warnings;" {
        "Perl"
    } else if (l.starts_with("resource \"") || l.starts_with("data \"")) && hcl_block(l) {
        // (a block with a type and a name label: `resource "aws_s3_bucket" "logs" {`)
        "HCL"
    } else {
        return None;
    };
    Some(name)
}

/// The third language a line is typical of.
fn typical(l: &str) -> Option<&'static str> {
    let semi = l.ends_with(';');
    let first = l.split_whitespace().next().unwrap_or("");
    let name = if l.starts_with("console.log(")
        || l.starts_with("console.error(")
        || l.contains("require(") && matches!(first, "const" | "let" | "var")
        || l.starts_with("module.exports")
        || l.starts_with("export default ")
        || (l.starts_with("import ") && l.contains(" from '") && semi)
        || (matches!(first, "const" | "let" | "var") && l.contains(" = ") && semi)
        || (l.starts_with("function ") || l.starts_with("async function "))
            && l.ends_with('{')
            && l.contains('(')
            && !l.contains("()")
        || l.contains(") => {")
        || l.starts_with("document.")
        || l.contains("process.argv")
        || method_statement(l)
    {
        "JavaScript"
    } else if (first == "my" || first == "our") && l.contains(['$', '@', '%']) && semi
        || l.starts_with("foreach my ")
        || (first == "sub" && l.ends_with('{'))
        || l.starts_with("print STDERR ")
        || l.contains("=~ s/") && semi
    {
        "Perl"
    } else if l.starts_with('$') && l.contains(" = ") && semi
        || l.starts_with("echo ") && l.contains('$') && l.contains("->")
        || l.starts_with("function ") && l.contains("($")
    {
        "PHP"
    } else if first == "puts" && !l.contains(" = ")
        || l.starts_with("require '")
        || l.contains(".each do |")
        || l.contains(" do |") && l.ends_with('|')
        || l.starts_with("attr_accessor ")
        || l.starts_with("def ") && !l.ends_with(':') && (l.ends_with(')') || !l.contains('('))
        || rake(l)
    {
        "Ruby"
    } else if l.starts_with("fmt.Println(")
        || l.starts_with("fmt.Printf(")
        || l.split_once(" := ").is_some_and(|(lhs, _)| {
            lhs.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ' '))
        })
        || l == "import ("
    {
        "Go"
    } else if l.starts_with("println!(") || l.starts_with("let mut ") || l.starts_with("use std::")
    {
        "Rust"
    } else if l.starts_with("System.out.println(") || l.starts_with("public class ") {
        "Java"
    } else if scala(l) {
        "Scala"
    } else if solidity(l) {
        "Solidity"
    } else if gdscript(l) {
        "GDScript"
    } else if applescript(l) {
        "AppleScript"
    } else if l.starts_with("Console.WriteLine(") {
        "C#"
    } else if l.starts_with("printf(") && semi
        || l.starts_with("int main(")
        || l.starts_with("std::cout")
    {
        "C"
    } else if powershell(l) {
        "PowerShell"
    } else if sql(l) {
        "SQL"
    } else if first == "local" && l.contains(" = ") && !l.contains('$') || lua(l) {
        "Lua"
    } else if r_assignment(l)
        || l.starts_with("library(")
        || l.starts_with("suppressPackageStartupMessages(")
    {
        "R"
    } else if julia(l) {
        "Julia"
    } else if hcl_block(l) {
        "HCL"
    } else if fortran(l) {
        "Fortran"
    } else if matlab(l) {
        "MATLAB"
    } else if tcl(l) {
        "Tcl"
    } else if batch(l) {
        "Batch"
    } else if dockerfile_instruction(l) {
        "Dockerfile"
    } else if make_line(l) {
        "Makefile"
    } else {
        return None;
    };
    Some(name)
}

/// `process.exit(0);`, `fs.writeFileSync(p, data);`: a method called on an object as a statement
/// closed by `;`. Python allows the `;` but never needs it; in Bash the parentheses do not parse.
fn method_statement(l: &str) -> bool {
    let Some(body) = l.strip_suffix(");") else {
        return false;
    };
    let callee = &body[..body.find('(').unwrap_or(0)];
    let mut parts = callee.split('.');
    callee.contains('.')
        && parts.all(|p| {
            p.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '$')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        })
}

/// `x <- c(1, 2)`: R's assignment. In Python it is a comparison thrown away, in Bash a command
/// with an input redirection from a file named `-`.
fn r_assignment(l: &str) -> bool {
    l.split_once(" <- ").is_some_and(|(name, _)| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$'))
    })
}

/// Windows batch files: `REM` comments, `set NAME=value`, `%NAME%` expansions, `goto`.
fn batch(l: &str) -> bool {
    let upper = l.to_ascii_uppercase();
    let expands = l.split('%').skip(1).step_by(2).next().is_some_and(|name| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    }) && l.matches('%').count() >= 2;
    upper.starts_with("REM ")
        || upper.starts_with("GOTO ")
        || upper.starts_with("IF ERRORLEVEL ")
        || upper.starts_with("IF EXIST ")
        || (upper.starts_with("SET ") && assigns(&l[4..]))
        || (upper.starts_with("ECHO ") && expands)
}

/// `FROM python:3.11-slim [AS build]`: a Dockerfile's first instruction (an image reference).
fn dockerfile_from(l: &str) -> bool {
    let mut words = l.split_whitespace();
    words.next() == Some("FROM")
        && words.next().is_some_and(|image| {
            image.contains([':', '/']) || image.chars().all(|c| c.is_ascii_lowercase())
        })
}

/// Dockerfile instructions: upper-case keywords no shell command is named.
fn dockerfile_instruction(l: &str) -> bool {
    let Some((word, rest)) = l.split_once(' ') else {
        return false;
    };
    matches!(
        word,
        "RUN"
            | "COPY"
            | "ADD"
            | "WORKDIR"
            | "EXPOSE"
            | "ENTRYPOINT"
            | "CMD"
            | "USER"
            | "VOLUME"
            | "HEALTHCHECK"
            | "LABEL"
            | "ARG"
            | "SHELL"
            | "ONBUILD"
            | "STOPSIGNAL"
    ) && !rest.trim().is_empty()
}

/// Makefile lines: `VAR ?= value`, `VAR := value`, a rule `target: prerequisites`, a pattern
/// rule `%.o: %.c`, a recipe using `$@`, `$<`, `$^` or `$(CC)`.
fn make_line(l: &str) -> bool {
    let assigns = [" ?= ", " := ", " += ", " ::= "].iter().any(|op| {
        l.split_once(op).is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    });
    let rule = l.split_once(':').is_some_and(|(target, rest)| {
        !target.is_empty()
            && !rest.starts_with([':', '='])
            && target
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '%' | '/'))
            && target.contains(|c: char| c.is_ascii_alphabetic() || c == '%')
    });
    let recipe = ["$@", "$<", "$^", "$(CC)", "$(MAKE)", "$(CFLAGS)"]
        .iter()
        .any(|v| l.contains(v));
    assigns || rule || recipe
}

/// `NAME=value` after batch's `set` (bash's `set` takes options or positional words).
fn assigns(rest: &str) -> bool {
    rest.split_once('=').is_some_and(|(name, _)| {
        name.starts_with(|c: char| c.is_ascii_alphabetic())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn powershell(l: &str) -> bool {
    const CMDLETS: &[&str] = &[
        "Write-Host",
        "Write-Output",
        "Get-ChildItem",
        "Get-Content",
        "Set-Content",
        "Get-Process",
        "Invoke-WebRequest",
        "Invoke-RestMethod",
        "Remove-Item",
        "New-Item",
        "Set-ExecutionPolicy",
        "Start-Process",
        "Import-Module",
    ];
    CMDLETS.iter().any(|c| l.contains(c))
        || l.starts_with("$env:")
        || l.starts_with("param(")
        || l.starts_with("[CmdletBinding(")
        || l.contains("| ForEach-Object")
        || l.contains("| Where-Object")
        || cmdlet_call(l)
        || variable_assignment(l)
}

/// A line that starts with a cmdlet: `Verb-Noun` with one of PowerShell's approved verbs
/// (`Expand-Archive`, `Join-Path`, `Test-Path`, `ConvertTo-Json`). Shell commands are lower-case.
fn cmdlet_call(l: &str) -> bool {
    const VERBS: &[&str] = &[
        "Add",
        "Clear",
        "Compress",
        "ConvertFrom",
        "ConvertTo",
        "Copy",
        "Disable",
        "Enable",
        "Expand",
        "Export",
        "Format",
        "Get",
        "Import",
        "Install",
        "Invoke",
        "Join",
        "Measure",
        "Move",
        "New",
        "Out",
        "Read",
        "Register",
        "Remove",
        "Rename",
        "Resolve",
        "Restart",
        "Select",
        "Set",
        "Sort",
        "Split",
        "Start",
        "Stop",
        "Test",
        "Uninstall",
        "Unregister",
        "Update",
        "Wait",
        "Write",
    ];
    let first = l.split_whitespace().next().unwrap_or("");
    let first = first.trim_start_matches(['(', '&', '.']).trim_start();
    first.split_once('-').is_some_and(|(verb, noun)| {
        VERBS.contains(&verb)
            && noun.starts_with(|c: char| c.is_ascii_uppercase())
            && noun.chars().all(|c| c.is_ascii_alphanumeric())
    })
}

/// `$name = value` (with a scope such as `$script:`, `$env:`): blanks around `=` make it a
/// command named by a variable in Bash, and Python names have no `$`. (PHP writes the same with a
/// closing `;`, which is checked before this.)
fn variable_assignment(l: &str) -> bool {
    let Some(rest) = l.strip_prefix('$') else {
        return false;
    };
    let name_end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(rest.len());
    name_end > 0
        && !rest[..name_end].ends_with(':')
        // (blanks before the operator may align a block of assignments: `$Server   = "db"`)
        && rest[name_end..].starts_with(' ')
        && ["= ", "+= ", "-= "]
            .iter()
            .any(|op| rest[name_end..].trim_start().starts_with(op))
}

fn sql(l: &str) -> bool {
    let upper = l.to_ascii_uppercase();
    let statement = [
        "SELECT ",
        "INSERT INTO ",
        "CREATE TABLE ",
        "UPDATE ",
        "DELETE FROM ",
    ]
    .iter()
    .any(|k| upper.starts_with(k));
    statement && (l.ends_with(';') || upper.contains(" FROM ") || upper.contains(" VALUES"))
}

/// The third language `text` is written in, if its shebang or its lines say so: the language with
/// the most typical lines, decisive when its shebang or one of its decisive lines was seen.
pub(super) fn detect(text: &str) -> Option<Foreign> {
    if let Some(name) = shebang(text) {
        return Some(Foreign {
            name,
            lines: 1,
            decisive: true,
        });
    }
    let mut seen: Vec<Foreign> = Vec::new();
    // Lines inside a Python triple-quoted string are data (a script writing C or SQL), not code.
    let mut in_string = false;
    for l in text.lines().take(200).map(str::trim) {
        let quotes = l.matches("\"\"\"").count() + l.matches("'''").count();
        if in_string || quotes > 0 {
            in_string ^= quotes % 2 == 1;
            continue;
        }
        if l.is_empty() || l.starts_with("//") || l.starts_with("# ") {
            continue;
        }
        let (name, decisive) = match (decisive(l), typical(l)) {
            (Some(name), _) => (name, true),
            (None, Some(name)) => (name, false),
            (None, None) => continue,
        };
        match seen.iter_mut().find(|f| f.name == name) {
            Some(f) => {
                f.lines += 1;
                f.decisive |= decisive;
            }
            None => seen.push(Foreign {
                name,
                lines: 1,
                decisive,
            }),
        }
    }
    seen.into_iter().max_by_key(|f| (f.decisive, f.lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> Option<&'static str> {
        detect(text).map(|f| f.name)
    }

    #[test]
    fn shebangs_of_other_interpreters() {
        assert_eq!(name("#!/usr/bin/env node\nx\n"), Some("JavaScript"));
        assert_eq!(name("#!/usr/bin/perl -w\nx\n"), Some("Perl"));
        assert_eq!(name("#!/usr/bin/ruby2.7\n"), Some("Ruby"));
        assert_eq!(name("#!/usr/bin/env python3\n"), None);
        assert_eq!(name("#!/bin/bash\n"), None);
    }

    #[test]
    fn decisive_lines() {
        assert!(detect("<?php\necho 'x';\n").is_some_and(|f| f.decisive));
        assert!(detect("#include <stdio.h>\n").is_some_and(|f| f.name == "C" && f.decisive));
        assert!(detect("package main\n\nimport \"fmt\"\n").is_some_and(|f| f.name == "Go"));
    }

    #[test]
    fn typical_lines_are_counted_per_language() {
        let js =
            "const fs = require('fs');\nconst data = fs.readFileSync('x');\nconsole.log(data);\n";
        assert_eq!(
            detect(js),
            Some(Foreign {
                name: "JavaScript",
                lines: 3,
                decisive: false
            })
        );
        let ruby = "require 'json'\nputs 'hello'\n[1, 2].each do |x|\n  puts x\nend\n";
        assert_eq!(name(ruby), Some("Ruby"));
        let ps = "Write-Host \"hi\"\nGet-ChildItem C:\\ | ForEach-Object { $_.Name }\n";
        assert_eq!(name(ps), Some("PowerShell"));
        // every line PowerShell: assignments with blanks around `=`, Verb-Noun cmdlets
        let ps = "$ProgressPreference = 'SilentlyContinue'\n$dest = Join-Path $HOME \"tools\"\nif (-not (Test-Path $dest)) { New-Item -ItemType Directory $dest | Out-Null }\nExpand-Archive -Path pkg.zip -DestinationPath $dest\n$script:count += 1\n";
        let found = detect(ps).expect("PowerShell");
        assert_eq!((found.name, found.lines), ("PowerShell", 5));
        let js = "console.log(\"starting\");\nprocess.exit(0);\n";
        assert_eq!(name(js), Some("JavaScript"));
        let r = "x <- c(1, 2, 3)\ny <- mean(x)\nlibrary(ggplot2)\n";
        assert_eq!((name(r), detect(r).map(|f| f.lines)), (Some("R"), Some(3)));
        let bat = "@echo off\nset NAME=world\necho Hello %NAME%\n";
        assert!(detect(bat).is_some_and(|f| f.name == "Batch" && f.decisive && f.lines == 3));
        let docker = "FROM python:3.11-slim\nWORKDIR /app\nCOPY requirements.txt .\nRUN pip install -r requirements.txt\n";
        assert!(detect(docker).is_some_and(|f| f.name == "Dockerfile" && f.decisive));
        let make = "CFLAGS ?= -O2\n\nall: app\n\napp: main.o\n\t$(CC) $(CFLAGS) -o $@ $^\n";
        assert_eq!(name(make), Some("Makefile"));
        let julia = "using LinearAlgebra, Printf\nfunction f(A::Matrix{Float64})\n    for i in 1:size(A, 1)\n    end\nend\n@printf(\"%.3f\\n\", 1.0)\n";
        assert_eq!(
            (name(julia), detect(julia).map(|f| f.lines)),
            (Some("Julia"), Some(4))
        );
        let fortran = "program heat\n  implicit none\n  real(8), allocatable :: u(:)\n  print *, 'done'\nend program heat\n";
        assert_eq!(name(fortran), Some("Fortran"));
        let matlab = "function [m, s] = stats(x)\n  m = mean(x);\nend\nA = [1 2; 3 4];\nfprintf('%d\\n', numel(A));\n";
        assert_eq!(name(matlab), Some("MATLAB"));
        let tcl2 = "set n [llength $argv]\nfor {set i 0} {$i < $n} {incr i} {\n  if {$i > 2} {\n    puts $i\n  }\n}\n";
        assert_eq!(name(tcl2), Some("Tcl"));
        let tcl = "proc add {a b} {\n  return [expr {$a + $b}]\n}\nset n [add 1 2]\nforeach x $items {\n  puts $x\n}\n";
        assert_eq!(name(tcl), Some("Tcl"));
        let hcl = "terraform {\n  required_version = \">= 1.5\"\n}\nvariable \"region\" {\n  default = \"eu-west-1\"\n}\nresource \"aws_s3_bucket\" \"logs\" {\n}\n";
        assert_eq!(
            (name(hcl), detect(hcl).map(|f| f.lines)),
            (Some("HCL"), Some(3))
        );
        for not_foreign in [
            "case $x in",
            "echo http://example.com",
            "RUN=1 ./job.sh",
            "trap cleanup EXIT",
            "set -euo pipefail",
            "set -- a b",
            "echo \"50% done\"",
            "print(x);",
            "if x <-1:",
            "for pair in 1:8080 db:5432; do",
            "for x in items[1:3]:",
            "using namespace std;",
            "function deploy {",
            "set -- \"${args[@]}\"",
            "foreach_item() {",
            "data = [1, 2, 3]",
            "print(f\"{x::>10}\")",
        ] {
            assert_eq!(name(not_foreign), None, "{not_foreign}");
        }
        for not_ps in [
            "x=$(date)",
            "$CMD --flag",
            "echo $a = $b",
            "get-deps --all",
            "Set-up done",
        ] {
            assert_eq!(name(not_ps), None, "{not_ps}");
        }
    }

    #[test]
    fn ordinary_python_and_bash_show_no_third_language() {
        let py = "import os\n\ndef main():\n    x = [1, 2]\n    print(x)\n\nif __name__ == '__main__':\n    main()\n";
        assert_eq!(detect(py), None);
        let sh = "#!/bin/bash\nset -e\nfor f in *.txt; do\n  echo \"$f\"\ndone\nlocal_var=1\n";
        assert_eq!(detect(sh), None);
    }
}
