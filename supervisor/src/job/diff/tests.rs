//! Cases for every rule, bad inputs of the protocol included.
use super::*;

const MODIFY: &str = "\
diff --git a/src/app.py b/src/app.py
index 3b18e51..a2b1c3d 100644
--- a/src/app.py
+++ b/src/app.py
@@ -1,4 +1,4 @@
 import sys
-print('hello')
+print('hello, world')
 x = 1
 y = 2
";

fn one(diff: &str) -> FilePatch {
    let mut patch = parse(diff).expect("parses");
    assert_eq!(patch.files.len(), 1);
    patch.files.remove(0)
}

#[test]
fn a_git_modification_applies_at_its_line_and_at_an_offset() {
    let file = one(MODIFY);
    assert_eq!(file.path, "src/app.py");
    assert_eq!(file.change, Change::Modify);
    let original = b"import sys\nprint('hello')\nx = 1\ny = 2\n";
    let out = apply(&file, Some(original)).expect("applies");
    assert_eq!(
        out.as_deref(),
        Some(&b"import sys\nprint('hello, world')\nx = 1\ny = 2\n"[..])
    );
    let shifted = b"# header\n# more\nimport sys\nprint('hello')\nx = 1\ny = 2\nz = 3\n";
    let out = apply(&file, Some(shifted)).expect("applies at an offset");
    assert_eq!(
        out.as_deref(),
        Some(&b"# header\n# more\nimport sys\nprint('hello, world')\nx = 1\ny = 2\nz = 3\n"[..])
    );
}

#[test]
fn a_hunk_that_does_not_match_is_an_error_not_a_partial_change() {
    let file = one(MODIFY);
    let err =
        apply(&file, Some(b"import sys\nprint('bye')\nx = 1\ny = 2\n")).expect_err("no match");
    assert!(
        err.contains("hunk 1 of `src/app.py` does not apply"),
        "{err}"
    );
    assert!(apply(&file, None).is_err(), "missing file");
}

#[test]
fn creations_and_deletions_with_dev_null() {
    let created = one("--- /dev/null\n+++ b/new/file.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n");
    assert_eq!(
        (created.change, created.path.as_str()),
        (Change::Create, "new/file.txt")
    );
    assert_eq!(
        apply(&created, None).expect("create"),
        Some(b"one\ntwo\n".to_vec())
    );
    assert!(apply(&created, Some(b"")).is_err(), "exists already");
    let deleted = one("--- a/old.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-one\n-two\n");
    assert_eq!(deleted.change, Change::Delete);
    assert_eq!(apply(&deleted, Some(b"one\ntwo\n")).expect("delete"), None);
    assert!(
        apply(&deleted, Some(b"one\nthree\n")).is_err(),
        "different contents"
    );
}

#[test]
fn git_empty_files_and_modes() {
    let patch = parse(
        "diff --git a/empty b/empty\nnew file mode 100755\nindex 0000000..e69de29\n\
         diff --git a/gone b/gone\ndeleted file mode 100644\nindex e69de29..0000000\n",
    )
    .expect("parses");
    assert_eq!(patch.files[0].change, Change::Create);
    assert_eq!(patch.files[0].mode, Some(0o755));
    assert_eq!(
        apply(&patch.files[0], None).expect("create"),
        Some(Vec::new())
    );
    assert_eq!(patch.files[1].change, Change::Delete);
    assert_eq!(apply(&patch.files[1], Some(b"")).expect("delete"), None);
}

#[test]
fn missing_final_newlines_are_kept_and_checked() {
    let file = one(
        "--- a.txt\n+++ a.txt\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n",
    );
    assert_eq!(
        apply(&file, Some(b"a\nb")).expect("applies"),
        Some(b"a\nc".to_vec())
    );
    assert!(
        apply(&file, Some(b"a\nb\n")).is_err(),
        "the file ends with a newline"
    );
    let add_newline =
        one("--- a.txt\n+++ a.txt\n@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+x\n");
    assert_eq!(
        apply(&add_newline, Some(b"x")).expect("applies"),
        Some(b"x\n".to_vec())
    );
}

#[test]
fn binary_patches_renames_and_broken_hunks_are_refused() {
    let binary =
        "diff --git a/logo.png b/logo.png\nindex 1..2 100644\nGIT binary patch\nliteral 5\nabc\n";
    assert!(matches!(parse(binary), Err(DiffError::Binary(_))));
    assert!(matches!(
        parse("Binary files a/x and b/x differ\n"),
        Err(DiffError::Binary(_))
    ));
    assert!(matches!(
        parse("--- a\n+++ a\n@@ -1 +1 @@\n-\0\n+x\n"),
        Err(DiffError::Binary(_))
    ));
    let rename = "diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n";
    assert!(matches!(parse(rename), Err(DiffError::Unsupported(_))));
    assert!(matches!(
        parse("--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n"),
        Err(DiffError::Unsupported(_))
    ));
    for broken in [
        "--- a\n+++ a\n@@ -1,3 +1,3 @@\n x\n-y\n+z\n",
        "--- a\n+++ a\n@@ -1 +1 @@\n-a\n-b\n+c\n",
        "--- a\n+++ a\n@@ nonsense @@\n",
        "--- a\n+++ a\n",
        "just some text\n",
        "",
    ] {
        assert!(
            matches!(parse(broken), Err(DiffError::Malformed(_))),
            "{broken:?}"
        );
    }
}

#[test]
fn paths_are_returned_as_written_for_the_path_rules_to_judge() {
    let file = one("--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-root\n+evil\n");
    assert_eq!(file.path, "../etc/passwd");
    let file = one("--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-root\n+evil\n");
    assert_eq!(file.path, "/etc/passwd");
}

#[test]
fn several_hunks_apply_in_order_with_their_offsets() {
    let original: Vec<u8> = (1..=20)
        .flat_map(|i| format!("line {i}\n").into_bytes())
        .collect();
    let diff = "--- f\n+++ f\n@@ -2,3 +2,3 @@\n line 2\n-line 3\n+LINE 3\n line 4\n@@ -15,3 +15,4 @@\n line 15\n line 16\n+inserted\n line 17\n";
    let out = apply(&one(diff), Some(&original))
        .expect("applies")
        .expect("kept");
    let text = String::from_utf8(out).expect("utf8");
    assert!(text.contains("line 2\nLINE 3\nline 4"), "{text}");
    assert!(text.contains("line 16\ninserted\nline 17"), "{text}");
    assert_eq!(text.lines().count(), 21);
}
