//! Environment variables a `run_command` step may set, as data.
//!
//! The principle: a step may pass data to its program through the environment, never a way to make
//! an allowed program load or run other code (a preloaded library, a startup file, a module path,
//! an external helper, a shell function). Names are POSIX (`[A-Za-z_][A-Za-z0-9_]*`); the names
//! and prefixes below are refused; `PATH` may only list the image's own program directories.

/// Names refused outright: each makes some program in the images load or run other code.
pub const REFUSED_NAMES: &[&str] = &[
    // Shells: startup files, hooks, options and word splitting.
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "PS4",
    "SHELLOPTS",
    "BASHOPTS",
    "IFS",
    "CDPATH",
    "GLOBIGNORE",
    // Python.
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONINSPECT",
    "PYTHONUSERBASE",
    "PYTHONBREAKPOINT",
    "PYTHONEXECUTABLE",
    "PYTHONPLATLIBDIR",
    // Perl, Ruby, Node, Java.
    "PERL5LIB",
    "PERL5OPT",
    "PERLLIB",
    "PERL5DB",
    "RUBYOPT",
    "RUBYLIB",
    "NODE_OPTIONS",
    "NODE_PATH",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    // Git: configuration and helper programs.
    "GIT_CONFIG",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_EXTERNAL_DIFF",
    "GIT_EXEC_PATH",
    "GIT_ASKPASS",
    "GIT_EDITOR",
    "GIT_PAGER",
    "GIT_PROXY_COMMAND",
    "GIT_TEMPLATE_DIR",
    "GIT_SEQUENCE_EDITOR",
    "SSH_ASKPASS",
    // Helpers many programs start.
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "BROWSER",
    "LESSOPEN",
    "LESSCLOSE",
    // The C library: locale and charset modules, resolver files.
    "GCONV_PATH",
    "LOCPATH",
    "NLSPATH",
    "HOSTALIASES",
    "RESOLV_HOST_CONF",
];

/// Prefixes refused: every name starting with one of them.
pub const REFUSED_PREFIXES: &[&str] = &[
    "LD_",
    "BASH_FUNC_",
    "GIT_CONFIG_",
    "DYLD_",
    "MALLOC_",
    "GLIBC_",
];

/// The program directories of the runner images (the containers' `PATH`).
pub const IMAGE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Why `name=value` may not be set for a step (`None`: it may). `image_path` is the image's own
/// `PATH` (directories separated by `:`).
pub fn refusal(name: &str, value: &str, image_path: &str) -> Option<String> {
    let posix = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !posix {
        return Some(format!(
            "environment variable name `{}` is not a POSIX name",
            name.escape_debug()
        ));
    }
    if value.contains('\0') {
        return Some(format!("environment variable `{name}` contains a NUL byte"));
    }
    if REFUSED_NAMES.contains(&name) || REFUSED_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return Some(format!(
            "environment variable `{name}` is refused: it can make a program load or run other code"
        ));
    }
    if name == "PATH" {
        let image: Vec<&str> = image_path.split(':').filter(|d| !d.is_empty()).collect();
        if let Some(dir) = value.split(':').find(|d| !image.contains(d)) {
            return Some(format!(
                "PATH may only list the image's program directories ({image_path}); `{dir}` is not one"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loaders_hooks_and_module_paths_are_refused() {
        for name in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "BASH_ENV",
            "ENV",
            "BASH_FUNC_x",
            "PROMPT_COMMAND",
            "PYTHONSTARTUP",
            "PYTHONPATH",
            "PYTHONHOME",
            "PYTHONINSPECT",
            "PERL5LIB",
            "PERL5OPT",
            "RUBYOPT",
            "NODE_OPTIONS",
            "GIT_CONFIG_COUNT",
            "GIT_CONFIG_KEY_0",
            "GIT_SSH_COMMAND",
            "GIT_EXTERNAL_DIFF",
            "GIT_EXEC_PATH",
            "GIT_ASKPASS",
        ] {
            assert!(refusal(name, "x", IMAGE_PATH).is_some(), "{name}");
        }
    }

    #[test]
    fn names_are_posix_and_values_have_no_nul() {
        for name in ["1X", "A-B", "A B", "", "BASH_FUNC_f%%", "é"] {
            assert!(refusal(name, "x", IMAGE_PATH).is_some(), "{name:?}");
        }
        assert!(refusal("X", "a\0b", IMAGE_PATH).is_some());
        for name in [
            "HOME",
            "LANG",
            "MY_VAR",
            "_x1",
            "PYTHONUNBUFFERED",
            "GIT_AUTHOR_NAME",
        ] {
            assert_eq!(refusal(name, "value", IMAGE_PATH), None, "{name}");
        }
    }

    #[test]
    fn path_may_only_reorder_or_narrow_the_image_directories() {
        assert_eq!(refusal("PATH", "/usr/bin:/bin", IMAGE_PATH), None);
        assert_eq!(refusal("PATH", IMAGE_PATH, IMAGE_PATH), None);
        for bad in [
            "/workspace:/usr/bin",
            "/tmp",
            ".:/usr/bin",
            "/usr/bin:",
            "/sbin",
        ] {
            assert!(refusal("PATH", bad, IMAGE_PATH).is_some(), "{bad:?}");
        }
    }
}
