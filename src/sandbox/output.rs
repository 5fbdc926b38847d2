//! Output kept from a run: capped while it streams, so a flood never grows the service's memory.

/// Up to `limit` bytes of a stream; what comes later is counted but dropped.
#[derive(Debug, Clone, Default)]
pub struct CappedText {
    bytes: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl CappedText {
    pub fn new(limit: u64) -> Self {
        CappedText {
            bytes: Vec::new(),
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            truncated: false,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        let room = self.limit.saturating_sub(self.bytes.len());
        if chunk.len() > room {
            self.truncated = true;
        }
        self.bytes
            .extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    pub fn mark_truncated(&mut self) {
        self.truncated = true;
    }

    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The text, with invalid UTF-8 replaced (a cut in the middle of a character included).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_at_most_the_limit_and_flags_the_rest() {
        let mut t = CappedText::new(5);
        t.push(b"abc");
        assert!(!t.truncated());
        t.push(b"defgh");
        assert_eq!(t.text(), "abcde");
        assert!(t.truncated());
        t.push(b"more");
        assert_eq!(t.len(), 5);
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let mut t = CappedText::new(100);
        t.push(&[b'h', b'i', 0xff]);
        assert_eq!(t.text(), "hi\u{fffd}");
        let mut cut = CappedText::new(1);
        cut.push("é".as_bytes());
        assert_eq!(cut.text(), "\u{fffd}");
    }
}
