//! What the one walk learns about a Bash script's variables: constants (assigned once, or
//! appended to in document order), the words loop variables run over, arrays of constants,
//! aliases, and functions that run their arguments as a command.

use rustc_hash::FxHashMap;
use tree_sitter::Node;

use super::{BashKinds, BashSem};
use crate::rules::codec::decode_c_escapes;
use crate::rules::grammar::{children_in_field, text};

/// At most this many constants are kept as a variable's [`BashFacts::alternatives`].
const MAX_ALTERNATIVES: usize = 16;

/// Variables assigned in a script.
#[derive(Debug, Default)]
pub struct BashFacts {
    pub(super) consts: FxHashMap<String, Option<String>>,
    /// Variables assigned once to a value only partly known (`ws="preview-pr-$PR"`): the known
    /// leading parts of that value; `None` once assigned again.
    pub(super) leads: FxHashMap<String, Option<Vec<String>>>,
    /// Loop variables of `for v in WORDS`: the words' values when all are constants.
    pub(super) loops: FxHashMap<String, Option<Vec<String>>>,
    /// Arrays assigned once to constant words (`parts=(c u r l)`).
    pub(super) arrays: FxHashMap<String, Option<Vec<String>>>,
    /// Arrays assigned once, as the source text of their words (`t=("$HOME/.ssh" /var/www)`): what
    /// `"${t[@]}"` expands to, word for word, when the words are not all constants.
    pub(crate) array_texts: FxHashMap<String, Option<String>>,
    /// Associative arrays of constants (`declare -A c=([root]=/ [dir]=srv)`, `c[key]=value`), in
    /// document order; `None` once a key or a value is only known at run time.
    pub(super) assoc: FxHashMap<String, Option<FxHashMap<String, String>>>,
    /// Aliases defined once to a constant (`alias tidy='rm -rf'`).
    pub(crate) aliases: FxHashMap<String, Option<String>>,
    /// Functions whose body runs their arguments as a command (`run() { "$@"; }`, and a function
    /// that passes `"$@"` on to one of those).
    pub(crate) runners: rustc_hash::FxHashSet<String>,
    /// The script's functions (defined so far, in document order) and the byte ranges of the
    /// commands that call each, for what their positional parameters take.
    pub(super) functions: FxHashMap<String, Vec<(usize, usize)>>,
    /// The byte range of every value assigned to a variable, in document order
    /// (`RC="$HOME/.bashrc"`, then `RC="$HOME/.zshrc"`): what a file name ends with when its start
    /// is only known at run time.
    pub(crate) assigned_ranges: FxHashMap<String, Vec<(usize, usize)>>,
    /// Every value assigned to a variable when each is a constant (`cmd="show run"` in one
    /// `case` branch, `cmd="show config"` in another): the values it can hold. `None` once one
    /// assignment is only known at run time or appends.
    pub(crate) alternatives: FxHashMap<String, Option<Vec<String>>>,
    /// The branches of the script's `case` statements (which narrow what a variable holds), in
    /// document order.
    pub(super) case_items: Vec<CaseItem>,
}

/// A branch of a `case` statement: the variable tested, the branch's byte range, and its
/// patterns when they are all plain words.
#[derive(Debug)]
pub(super) struct CaseItem {
    pub(super) tested: String,
    pub(super) range: (usize, usize),
    pub(super) patterns: Option<Vec<String>>,
}

impl BashFacts {
    pub fn observe(&mut self, k: &BashKinds, node: Node<'_>, src: &str) {
        let kind = node.kind_id();
        if kind == k.case_statement {
            return self.observe_case(node, src);
        }
        if kind == k.function_definition {
            if let Some(name) = node.child_by_field_id(k.f_name) {
                self.functions
                    .entry(text(name, src).to_string())
                    .or_default();
            }
            self.observe_function(k, node, src);
        } else if kind == k.variable_assignment {
            let Some(name) = node.child_by_field_id(k.f_name) else {
                return;
            };
            if name.kind_id() == k.subscript {
                return self.observe_entry(k, node, name, src);
            }
            let name = text(name, src).to_string();
            if let Some(array) = node
                .child_by_field_id(k.f_value)
                .filter(|v| v.kind_id() == k.array)
            {
                let sem = BashSem {
                    k,
                    facts: self,
                    src,
                    interpreters: None,
                };
                let words: Option<Vec<String>> = array
                    .named_children(&mut array.walk())
                    .map(|w| sem.fold(w))
                    .collect();
                let again = self.arrays.contains_key(&name);
                let value = if again { None } else { words };
                self.arrays.insert(name.clone(), value);
                let words = array
                    .named_children(&mut array.walk())
                    .map(|w| text(w, src))
                    .collect::<Vec<_>>()
                    .join(" ");
                self.array_texts
                    .insert(name.clone(), (!again).then_some(words));
                self.observe_assoc(k, &name, array, src);
            }
            if let Some(v) = node.child_by_field_id(k.f_value) {
                self.assigned_ranges
                    .entry(name.clone())
                    .or_default()
                    .push((v.start_byte(), v.end_byte()));
            }
            let value = self.assigned_value(k, node, src);
            // `x+="…"` after `x="…"` (in document order) is still a constant.
            let appends = src
                .get(node.start_byte()..)
                .is_some_and(|t| t[name.len().min(t.len())..].starts_with("+="));
            let alternative = value.clone().filter(|_| !appends);
            let slot = self
                .alternatives
                .entry(name.clone())
                .or_insert_with(|| Some(Vec::new()));
            match (slot.as_mut(), alternative) {
                (Some(values), Some(v)) if values.len() < MAX_ALTERNATIVES => {
                    if !values.contains(&v) {
                        values.push(v);
                    }
                }
                _ => *slot = None,
            }
            let first = !self.consts.contains_key(&name);
            let value = match (self.consts.get(&name), appends) {
                (None, false) => value,
                (Some(Some(before)), true) => value.map(|v| format!("{before}{v}")),
                _ => None,
            };
            if value.is_none() {
                let leads = first.then(|| self.assigned_leads(k, node, src)).flatten();
                self.leads.insert(name.clone(), leads);
            }
            self.consts.insert(name, value);
        } else if kind == k.for_statement {
            if let Some(var) = node.child_by_field_id(k.f_variable) {
                let name = text(var, src).to_string();
                let sem = BashSem {
                    k,
                    facts: self,
                    src,
                    interpreters: None,
                };
                // each word (an unquoted expansion of a constant splits into its words: `for d
                // in $DIRS`), or the words of `"${parts[@]}"` of an array of constants
                let words: Option<Vec<String>> = children_in_field(node, k.f_value)
                    .into_iter()
                    .map(|w| {
                        let bare = w.kind_id() == k.simple_expansion || w.kind_id() == k.expansion;
                        sem.fold(w)
                            .map(|v| match bare {
                                true => v.split_whitespace().map(str::to_string).collect(),
                                false => vec![v],
                            })
                            .or_else(|| sem.array_words(w))
                    })
                    .collect::<Option<Vec<Vec<String>>>>()
                    .map(|w| w.concat());
                // a second loop over the same name: either loop's words
                let words = words.filter(|w| !w.is_empty());
                let values = match (self.loops.get(&name), words) {
                    (None, words) => words,
                    (Some(Some(before)), Some(words)) => {
                        let mut all = before.clone();
                        all.extend(words.into_iter().filter(|w| !before.contains(w)));
                        Some(all)
                    }
                    _ => None,
                };
                self.loops.insert(name.clone(), values);
                self.consts.insert(name, None);
            }
        } else if kind == k.command {
            // `read x`, `mapfile x`, `printf -v x`: run-time values.
            let name = node.child_by_field_id(k.f_name).map(|n| text(n, src));
            if let Some(calls) = name.and_then(|n| self.functions.get_mut(n)) {
                calls.push((node.start_byte(), node.end_byte()));
            }
            if name == Some("printf")
                && let Some((var, value)) = self.printf_to_variable(k, node, src)
            {
                let value = if self.consts.contains_key(&var) {
                    None
                } else {
                    value
                };
                self.consts.insert(var, value);
                return;
            }
            if name == Some("alias") {
                self.observe_alias(k, node, src);
                return;
            }
            // `: "${WORKSPACE:=/}"`: the variable is given the default when the caller left it
            // unset, the case a rule must assume (as for `${PREFIX:-/usr}`)
            if name == Some(":") {
                for arg in children_in_field(node, k.f_argument) {
                    if let Some((var, value)) = assigned_default(text(arg, src))
                        && !self.consts.contains_key(var)
                    {
                        self.consts.insert(var.to_string(), Some(value.to_string()));
                    }
                }
                return;
            }
            if matches!(
                name,
                Some("read" | "mapfile" | "readarray" | "printf" | "getopts")
            ) {
                for arg in children_in_field(node, k.f_argument) {
                    let t = text(arg, src);
                    if !t.starts_with('-') && t.chars().all(|c| c.is_alphanumeric() || c == '_') {
                        self.consts.insert(t.to_string(), None);
                    }
                }
            }
        }
    }
}

impl BashFacts {
    /// `([key]=value …)`: the entries of an associative array, when every element is one.
    fn observe_case(&mut self, statement: Node<'_>, src: &str) {
        let Some(tested) = statement.child_by_field_name("value") else {
            return;
        };
        let tested = text(tested, src)
            .trim_matches('"')
            .trim_start_matches('$')
            .trim_matches(['{', '}'])
            .to_string();
        let mut cursor = statement.walk();
        for item in statement.named_children(&mut cursor) {
            if item.kind() != "case_item" {
                continue;
            }
            let patterns: Vec<String> = item
                .children_by_field_name("value", &mut item.walk())
                .map(|p| text(p, src).to_string())
                .collect();
            let plain = !patterns.is_empty()
                && patterns.iter().all(|p| {
                    !p.is_empty()
                        && p.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
                });
            self.case_items.push(CaseItem {
                tested: tested.clone(),
                range: (item.start_byte(), item.end_byte()),
                patterns: plain.then_some(patterns),
            });
        }
    }

    fn observe_assoc(&mut self, k: &BashKinds, name: &str, array: Node<'_>, src: &str) {
        let mut entries = FxHashMap::default();
        let elements: Vec<Node<'_>> = array.named_children(&mut array.walk()).collect();
        if elements.is_empty() {
            return;
        }
        for element in elements {
            let t = text(element, src);
            let Some((key, _)) = t.strip_prefix('[').and_then(|r| r.split_once("]=")) else {
                return;
            };
            // The value: the element's parts after `]=`, folded.
            let value_start = element.start_byte() + key.len() + 3;
            let sem = BashSem {
                k,
                facts: self,
                src,
                interpreters: None,
            };
            let value = if element.kind_id() == k.concatenation {
                element
                    .named_children(&mut element.walk())
                    .filter(|p| p.start_byte() >= value_start)
                    .map(|p| sem.fold(p))
                    .collect::<Option<String>>()
            } else {
                Some(String::new())
            };
            let folded_key = constant_key(key);
            match (folded_key, value) {
                (Some(key), Some(value)) => {
                    entries.insert(key, value);
                }
                _ => {
                    self.assoc.insert(name.to_string(), None);
                    return;
                }
            }
        }
        self.assoc.insert(name.to_string(), Some(entries));
    }

    /// The value an assignment gives, when constant (`x=` alone gives the empty string).
    fn assigned_value(&self, k: &BashKinds, node: Node<'_>, src: &str) -> Option<String> {
        match node.child_by_field_id(k.f_value) {
            Some(v) => BashSem {
                k,
                facts: self,
                src,
                interpreters: None,
            }
            .fold(v),
            None => Some(String::new()),
        }
    }

    /// The known leading parts of a value only partly known (a string or a word glued from
    /// parts), for [`BashSem::prefixes`].
    fn assigned_leads(&self, k: &BashKinds, node: Node<'_>, src: &str) -> Option<Vec<String>> {
        let value = node.child_by_field_id(k.f_value)?;
        if value.kind_id() != k.string && value.kind_id() != k.concatenation {
            return None;
        }
        // (what starts with a command's output or an argument has no known start)
        let body = text(value, src).trim_start_matches('"');
        if body.starts_with("$(") || body.starts_with('`') || body.starts_with("$@") {
            return None;
        }
        let leads = BashSem {
            k,
            facts: self,
            src,
            interpreters: None,
        }
        .prefixes(value);
        (!leads.is_empty()).then_some(leads)
    }

    /// `name[key]=value`: one more entry of an associative array, in document order.
    fn observe_entry(&mut self, k: &BashKinds, node: Node<'_>, subscript: Node<'_>, src: &str) {
        let Some(name) = subscript.child_by_field_id(k.f_name) else {
            return;
        };
        let name = text(name, src).to_string();
        let key = subscript
            .child_by_field_id(k.f_index)
            .and_then(|i| constant_key(text(i, src)));
        let value = self.assigned_value(k, node, src);
        let entries = self
            .assoc
            .entry(name)
            .or_insert_with(|| Some(FxHashMap::default()));
        match (entries.as_mut(), key, value) {
            (Some(map), Some(key), Some(value)) => {
                map.insert(key, value);
            }
            _ => *entries = None,
        }
    }

    /// `alias name='value'`: the value, when constant and the name is defined once.
    fn observe_alias(&mut self, k: &BashKinds, node: Node<'_>, src: &str) {
        for arg in children_in_field(node, k.f_argument) {
            let sem = BashSem {
                k,
                facts: self,
                src,
                interpreters: None,
            };
            let Some((name, value)) = sem.fold(arg).and_then(|a| {
                let (n, v) = a.split_once('=')?;
                Some((n.to_string(), v.to_string()))
            }) else {
                continue;
            };
            let value = (!self.aliases.contains_key(&name)).then_some(value);
            self.aliases.insert(name, value);
        }
    }

    /// A function whose body has a command named `"$@"` (or `$*`), or one calling a known runner
    /// with `"$@"` first: calling it runs its arguments.
    fn observe_function(&mut self, k: &BashKinds, node: Node<'_>, src: &str) {
        let Some(name) = node.child_by_field_id(k.f_name) else {
            return;
        };
        let Some(body) = node.child_by_field_id(k.f_body) else {
            return;
        };
        let all_args =
            |t: &str| matches!(t, "\"$@\"" | "$@" | "\"${@}\"" | "${@}" | "$*" | "\"$*\"");
        let mut stack = vec![body];
        while let Some(n) = stack.pop() {
            if n.kind_id() == k.command {
                let head = n.child_by_field_id(k.f_name).map(|c| text(c, src));
                let first = children_in_field(n, k.f_argument)
                    .first()
                    .map(|a| text(*a, src));
                let runs = head.is_some_and(all_args)
                    || (head.is_some_and(|h| self.runners.contains(h))
                        && first.is_some_and(all_args));
                if runs {
                    self.runners.insert(text(name, src).to_string());
                    return;
                }
            }
            stack.extend(n.named_children(&mut n.walk()));
        }
    }

    /// `printf -v var FORMAT ARGS…`: the variable, and its value when the format (with `%s`
    /// fields only) and the arguments are constants.
    fn printf_to_variable(
        &self,
        k: &BashKinds,
        command: Node<'_>,
        src: &str,
    ) -> Option<(String, Option<String>)> {
        let args = children_in_field(command, k.f_argument);
        let sem = BashSem {
            k,
            facts: self,
            src,
            interpreters: None,
        };
        if sem.fold(*args.first()?).as_deref() != Some("-v") {
            return None;
        }
        let var = sem.fold(*args.get(1)?)?;
        // (`"${parts[@]}"` stands for the array's words)
        let values: Option<Vec<String>> = args[2..]
            .iter()
            .map(|a| {
                sem.fold(*a)
                    .map(|v| vec![v])
                    .or_else(|| sem.array_words(*a))
            })
            .collect::<Option<Vec<Vec<String>>>>()
            .map(|v| v.concat());
        let value = values.and_then(|v| {
            let (format, rest) = v.split_first()?;
            let pieces: Vec<&str> = format.split("%s").collect();
            let mut rest = rest.iter().peekable();
            let mut out = String::new();
            // the format is used again while arguments are left (`printf '%s' a b` is `ab`)
            loop {
                out.push_str(pieces[0]);
                for piece in &pieces[1..] {
                    out.push_str(rest.next().map_or("", String::as_str));
                    out.push_str(piece);
                }
                if pieces.len() == 1 || rest.peek().is_none() || out.len() > 4096 {
                    break;
                }
            }
            (!out.contains('%')).then(|| decode_c_escapes(&out))
        });
        Some((var, value))
    }
}

/// `${NAME:=value}` / `${NAME=value}` with a constant value: the name and the value.
fn assigned_default(word: &str) -> Option<(&str, &str)> {
    let inner = word
        .trim_matches('"')
        .strip_prefix("${")?
        .strip_suffix('}')?;
    let name_len = inner
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(inner.len());
    let (name, op) = inner.split_at(name_len);
    let value = op.strip_prefix(":=").or_else(|| op.strip_prefix('='))?;
    let constant = !value.contains(['$', '`', '"', '\'', '\\']);
    (!name.is_empty() && constant).then_some((name, value))
}

/// An associative array's key when it is a constant word (`prefix`, `"prefix"`).
fn constant_key(key: &str) -> Option<String> {
    let key = key.trim_matches(|c| c == '"' || c == '\'');
    (!key.is_empty() && !key.contains(['$', '`', '(', '*', '@'])).then(|| key.to_string())
}
