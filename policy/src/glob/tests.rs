//! Glob syntax and matching, case by case.

use super::matching::SplitPath;
use super::*;

fn path(glob: &str, input: &str) -> bool {
    Glob::compile(glob, Flavor::Path)
        .expect("compiles")
        .matches(input.as_bytes())
}

fn text(glob: &str, input: &str) -> bool {
    Glob::compile(glob, Flavor::Text)
        .expect("compiles")
        .matches(input.as_bytes())
}

fn name(glob: &str, input: &str) -> bool {
    Glob::compile(glob, Flavor::Name)
        .expect("compiles")
        .matches(input.as_bytes())
}

#[test]
fn star_stays_in_its_component_and_globstar_crosses_them() {
    assert!(path("/etc/*", "/etc/passwd"));
    assert!(!path("/etc/*", "/etc/ssl/certs"));
    assert!(path("/etc/**", "/etc/ssl/certs/ca.pem"));
    assert!(
        path("/etc/**", "/etc"),
        "a trailing ** covers the directory itself"
    );
    assert!(!path("/etc/**", "/etcetera"));
    assert!(path("/**", "/"));
    assert!(path("/", "/"));
    assert!(!path("/", "/tmp"));
    assert!(path("**/.ssh/**", "/home/u/.ssh/id_rsa"));
    assert!(path("**/.ssh/**", "/.ssh"));
    assert!(!path("**/.ssh/**", "/home/u/ssh/id_rsa"));
    assert!(path("/home/*/.aws/**", "/home/bob/.aws/credentials"));
    assert!(!path("/home/*/.aws/**", "/home/bob/x/.aws/credentials"));
    assert!(path("/a/**/b/**/c", "/a/b/c"));
    assert!(path("/a/**/b/**/c", "/a/x/y/b/z/c"));
    assert!(!path("/a/**/b/**/c", "/a/x/y/b/z/d"));
    assert!(path("/usr/lib/python3*/**", "/usr/lib/python3.11/os.py"));
}

#[test]
fn absolute_globs_never_match_relative_paths() {
    assert!(!path("/tmp/**", "tmp/x"));
    assert!(path("**", "tmp/x"));
    assert!(path("**/x", "tmp/x"));
}

#[test]
fn question_marks_classes_and_escapes() {
    assert!(path("/dev/tty?", "/dev/tty1"));
    assert!(!path("/dev/tty?", "/dev/tty12"));
    assert!(path("/x/é?", "/x/éü"), "? is one character, not one byte");
    assert!(path("/dev/sd[a-c]", "/dev/sdb"));
    assert!(!path("/dev/sd[a-c]", "/dev/sdd"));
    assert!(path("/dev/sd[!a-c]", "/dev/sdd"));
    assert!(path("/x/[]]", "/x/]"));
    assert!(path("/x/[a-]", "/x/-"));
    assert!(path("/x/\\*", "/x/*"));
    assert!(!path("/x/\\*", "/x/y"));
    assert!(text("a\\{b", "a{b"));
}

#[test]
fn braces_expand_to_alternatives() {
    assert!(path("/etc/{shadow,gshadow}", "/etc/gshadow"));
    assert!(!path("/etc/{shadow,gshadow}", "/etc/passwd"));
    assert!(path("**/*.{pem,key}", "/srv/tls/server.key"));
    assert!(text("install{, *}", "install"));
    assert!(text("install{, *}", "install requests"));
    assert!(!text("install{, *}", "installer"));
    let g = Glob::compile("/{a,b}/{c,d,e}", Flavor::Path).expect("compiles");
    assert_eq!(g.alternatives(), 6);
    assert!(g.matches(b"/b/e"));
}

#[test]
fn text_stars_match_anything_and_names_stay_names() {
    assert!(text("-m pip *", "-m pip install requests"));
    assert!(text("*rf /*", "-rf /etc"));
    assert!(!text("-m pip *", "-m pipx install"));
    assert!(name("python3*", "python3.11"));
    assert!(!name("pip", "pip3"));
    assert!(name("*", "anything"));
}

#[test]
fn bad_globs_are_refused_with_their_reason() {
    let bad = |g: &str, f: Flavor| Glob::compile(g, f).expect_err(g);
    assert_eq!(bad("", Flavor::Path), GlobError::Empty);
    assert_eq!(bad("/etc/[ab", Flavor::Path), GlobError::UnclosedClass);
    assert_eq!(
        bad("/etc/[z-a]", Flavor::Path),
        GlobError::BadRange('z', 'a')
    );
    assert_eq!(bad("/etc/{a,b", Flavor::Path), GlobError::UnclosedBrace);
    assert_eq!(bad("/etc/a}", Flavor::Path), GlobError::UnmatchedBrace);
    assert_eq!(bad("/{a,{b,c}}", Flavor::Path), GlobError::NestedBrace);
    assert_eq!(bad("/etc\\", Flavor::Path), GlobError::TrailingEscape);
    assert_eq!(bad("etc/passwd", Flavor::Path), GlobError::NotAbsolute);
    assert_eq!(
        bad("/etc/**.conf", Flavor::Path),
        GlobError::PartialGlobstar
    );
    assert_eq!(bad("/etc//passwd", Flavor::Path), GlobError::EmptyComponent);
    assert_eq!(bad("/etc/", Flavor::Path), GlobError::EmptyComponent);
    assert_eq!(bad("/tmp/../etc", Flavor::Path), GlobError::DotComponent);
    assert_eq!(bad("/x/[a/]", Flavor::Path), GlobError::SlashInClass);
    assert_eq!(bad("bin/pip", Flavor::Name), GlobError::SlashInName);
    assert_eq!(bad("pip**", Flavor::Name), GlobError::GlobstarInName);
    let huge = "/{a,b,c,d}{a,b,c,d}{a,b,c,d}{a,b,c,d}";
    assert_eq!(bad(huge, Flavor::Path), GlobError::TooManyAlternatives);
    assert_eq!(bad(&"/a".repeat(600), Flavor::Path), GlobError::TooLong);
}

#[test]
fn hostile_inputs_stay_polynomial() {
    // Exponential for a recursive matcher; a few thousand steps here.
    let g = Glob::compile("*a*a*a*a*a*a*a*a*b", Flavor::Text).expect("compiles");
    assert!(!g.matches("a".repeat(4000).as_bytes()));
    let g = Glob::compile("/**/a/**/a/**/a/**/a/**/b", Flavor::Path).expect("compiles");
    assert!(!g.matches("/a".repeat(1500).as_bytes()));
}

#[test]
fn paths_too_deep_to_split_match_the_same() {
    let deep = format!("{}/.ssh/id", "/d".repeat(60));
    let g = Glob::compile("**/.ssh/**", Flavor::Path).expect("compiles");
    assert!(SplitPath::new(deep.as_bytes()).indexed().is_none());
    assert!(g.matches(deep.as_bytes()));
    assert!(!g.matches(deep.replace(".ssh", "ssh").as_bytes()));
    let g = Glob::compile("/d/d/*/d/**", Flavor::Path).expect("compiles");
    assert!(g.matches(deep.as_bytes()));
}

#[test]
fn stray_bytes_do_not_stop_matching() {
    let g = Glob::compile("/tmp/*", Flavor::Path).expect("compiles");
    assert!(g.matches(b"/tmp/\xff\xfe"));
    let g = Glob::compile("/tmp/?", Flavor::Path).expect("compiles");
    assert!(g.matches(b"/tmp/\xff"));
}
