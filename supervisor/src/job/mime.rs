//! Media types of artifacts, by file extension (the agent never sniffs contents).

/// Extension (lower case) → media type.
const TYPES: &[(&str, &str)] = &[
    ("json", "application/json"),
    ("jsonl", "application/jsonl"),
    ("ndjson", "application/x-ndjson"),
    ("txt", "text/plain"),
    ("log", "text/plain"),
    ("md", "text/markdown"),
    ("csv", "text/csv"),
    ("tsv", "text/tab-separated-values"),
    ("html", "text/html"),
    ("htm", "text/html"),
    ("css", "text/css"),
    ("xml", "application/xml"),
    ("yaml", "application/yaml"),
    ("yml", "application/yaml"),
    ("toml", "application/toml"),
    ("py", "text/x-python"),
    ("sh", "text/x-shellscript"),
    ("js", "text/javascript"),
    ("diff", "text/x-diff"),
    ("patch", "text/x-diff"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("svg", "image/svg+xml"),
    ("pdf", "application/pdf"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("tgz", "application/gzip"),
    ("tar", "application/x-tar"),
    ("parquet", "application/vnd.apache.parquet"),
    ("sqlite", "application/vnd.sqlite3"),
    ("db", "application/vnd.sqlite3"),
    (
        "xlsx",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ),
];

/// The media type of `path` by its extension; `application/octet-stream` when unknown.
pub fn mime_type(path: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or(path);
    let extension = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => ext.to_ascii_lowercase(),
        _ => return "application/octet-stream",
    };
    TYPES
        .iter()
        .find(|(e, _)| *e == extension)
        .map_or("application/octet-stream", |(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_come_from_the_extension() {
        assert_eq!(mime_type("/workspace/report.json"), "application/json");
        assert_eq!(mime_type("/workspace/out/plot.PNG"), "image/png");
        assert_eq!(mime_type("/workspace/.json"), "application/octet-stream");
        assert_eq!(mime_type("/workspace/Makefile"), "application/octet-stream");
        assert_eq!(mime_type("/workspace/a.tar.gz"), "application/gzip");
    }
}
