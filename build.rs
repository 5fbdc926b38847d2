//! The rule files (`patterns/`) and the built-in policies (`policies/`) are embedded with
//! `include_dir!`, which cargo does not track: without this, editing a rule file alone would
//! leave a binary (and tests) running the old rules.

fn main() {
    println!("cargo:rerun-if-changed=patterns");
    println!("cargo:rerun-if-changed=policies");
}
