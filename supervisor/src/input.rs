//! The host's messages on stdin: the first one (a one-shot script job, or a framed message such
//! as `RunJob`), then, while a job runs, whatever else the host sends until it closes the stream.

use std::os::fd::RawFd;

use scriptgate_supervisor::job::HARD_MAX_MESSAGE;
use scriptgate_supervisor::sessions::OpenSession;
use scriptgate_supervisor::{HostKind, Job, MAX_FRAME, MessageAssembler, RawFrameDecoder, RunJob};

const STDIN: RawFd = 0;

/// What the host sent first.
#[derive(Debug)]
pub(crate) enum First {
    /// Stdin ended before anything: the host discarded this container.
    Closed,
    /// A one-shot script run (stdin is closed after it).
    Script(Job),
    /// A job; the stream stays open for further messages.
    RunJob(Box<RunJob>, HostInput),
    /// A session; the stream stays open for its messages (`session`).
    Session(Box<OpenSession>, HostInput),
}

/// Reads the host's first message from stdin (blocking); the stream then turns non-blocking for
/// a job.
pub(crate) fn read_first() -> Result<First, String> {
    let first = first_message(&mut Stdin)?;
    if matches!(first, First::RunJob(..) | First::Session(..)) {
        set_nonblocking()?;
    }
    Ok(first)
}

/// The first message from `input`: told apart by its first byte (a length's high byte, 0, for a
/// one-shot script job; a `HostKind` for a framed message).
fn first_message(input: &mut impl std::io::Read) -> Result<First, String> {
    let mut first = [0u8];
    if read_some(input, &mut first)? == 0 {
        return Ok(First::Closed);
    }
    if first[0] == 0 {
        return legacy_job(input).map(First::Script);
    }
    let mut host = HostInput::default();
    host.decoder.push(&first);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if let Some((kind, message)) = host.next_message()? {
            if kind == HostKind::OpenSession as u8 {
                let open: OpenSession = serde_json::from_slice(&message)
                    .map_err(|e| format!("malformed session message: {e}"))?;
                return Ok(First::Session(Box::new(open), host));
            }
            if kind != HostKind::RunJob as u8 {
                return Err(format!("expected a job, got a message of kind {kind}"));
            }
            let run: RunJob = serde_json::from_slice(&message)
                .map_err(|e| format!("malformed job message: {e}"))?;
            return Ok(First::RunJob(Box::new(run), host));
        }
        let n = read_some(input, &mut buf)?;
        if n == 0 {
            return Err("stdin ended in the middle of a message".into());
        }
        host.decoder.push(&buf[..n]);
    }
}

/// `[len: u32 BE][JSON]` whose first byte (0) was read already.
fn legacy_job(input: &mut impl std::io::Read) -> Result<Job, String> {
    let mut rest = [0u8; 3];
    read_exact(input, &mut rest)?;
    let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
    if len > MAX_FRAME {
        return Err(format!("job of {len} bytes is too large"));
    }
    let mut buf = vec![0u8; len];
    read_exact(input, &mut buf)?;
    serde_json::from_slice(&buf).map_err(|e| format!("malformed job: {e}"))
}

/// Stdin read with plain `read` calls (no buffering: nothing past a message is consumed).
struct Stdin;

impl std::io::Read for Stdin {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // SAFETY: reading into a buffer of its own length from stdin.
        let n = unsafe { libc::read(STDIN, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

/// The stream after its first message, read without blocking while a job runs.
#[derive(Debug)]
pub(crate) struct HostInput {
    decoder: RawFrameDecoder,
    assembler: MessageAssembler,
    closed: bool,
    /// A session's messages that arrived while its job ran.
    deferred: Vec<(u8, Vec<u8>)>,
}

impl Default for HostInput {
    fn default() -> Self {
        HostInput {
            decoder: RawFrameDecoder::default(),
            assembler: MessageAssembler::new(HARD_MAX_MESSAGE),
            closed: false,
            deferred: Vec::new(),
        }
    }
}

impl HostInput {
    /// The descriptor to poll, until the host closes the stream.
    pub(crate) fn fd(&self) -> Option<RawFd> {
        (!self.closed).then_some(STDIN)
    }

    /// Every complete message that arrived, without blocking (a job's caller decides what each
    /// may be: see `agent::Runtime::read_input`).
    pub(crate) fn read_available(&mut self) -> Result<Vec<(u8, Vec<u8>)>, String> {
        self.fill();
        let mut out = Vec::new();
        loop {
            // Padding (a host that attached again) carries nothing.
            self.decoder.skip_padding();
            match self.next_message()? {
                Some(message) => out.push(message),
                None => return Ok(out),
            }
        }
    }

    /// Keeps a session's message that arrived while its job ran, for the session's loop
    /// ([`HostInput::session_messages`] returns it first).
    pub(crate) fn defer(&mut self, kind: u8, message: Vec<u8>) {
        self.deferred.push((kind, message));
    }

    /// Reads what the stream holds now, until it would block or ends.
    fn fill(&mut self) {
        let mut buf = [0u8; 64 * 1024];
        while !self.closed {
            // SAFETY: reading into a local buffer of its own length from stdin.
            let n = unsafe { libc::read(STDIN, buf.as_mut_ptr().cast(), buf.len()) };
            match n {
                0 => self.closed = true,
                n if n > 0 => self.decoder.push(&buf[..n as usize]),
                _ => match std::io::Error::last_os_error().kind() {
                    std::io::ErrorKind::WouldBlock => break,
                    std::io::ErrorKind::Interrupted => continue,
                    _ => self.closed = true,
                },
            }
        }
    }

    /// Session mode: every complete message that arrived, without blocking. Padding is skipped,
    /// and a frame that makes no sense (what a host that died mid-message leaves) drops what is
    /// buffered instead of ending the session; the messages then lost are answered by nothing,
    /// and a host that attached again asks once more.
    pub(crate) fn session_messages(&mut self) -> Vec<(u8, Vec<u8>)> {
        self.fill();
        let mut out = std::mem::take(&mut self.deferred);
        loop {
            self.decoder.skip_padding();
            match self.next_message() {
                Ok(Some(message)) => out.push(message),
                Ok(None) => return out,
                Err(_) => {
                    self.decoder.clear();
                    self.assembler.reset();
                    return out;
                }
            }
        }
    }

    /// Whether the host closed the stream for good.
    pub(crate) fn closed(&self) -> bool {
        self.closed
    }

    fn next_message(&mut self) -> Result<Option<(u8, Vec<u8>)>, String> {
        while let Some((kind, payload)) = self.decoder.next_frame().map_err(|e| e.to_string())? {
            if HostKind::from_u8(kind).is_none() {
                return Err(format!("unknown message kind {kind}"));
            }
            if let Some(message) = self
                .assembler
                .push(kind, payload)
                .map_err(|e| e.to_string())?
            {
                return Ok(Some(message));
            }
        }
        Ok(None)
    }
}

/// One read (retried on EINTR); 0 at end of input.
fn read_some(input: &mut impl std::io::Read, buf: &mut [u8]) -> Result<usize, String> {
    loop {
        match input.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading the job: {e}")),
        }
    }
}

fn read_exact(input: &mut impl std::io::Read, buf: &mut [u8]) -> Result<(), String> {
    let mut at = 0;
    while at < buf.len() {
        let n = read_some(input, &mut buf[at..])?;
        if n == 0 {
            return Err("stdin ended in the middle of the job".into());
        }
        at += n;
    }
    Ok(())
}

fn set_nonblocking() -> Result<(), String> {
    // SAFETY: fcntl on stdin with integer flags.
    unsafe {
        let flags = libc::fcntl(STDIN, libc::F_GETFL);
        if flags < 0 || libc::fcntl(STDIN, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(format!("stdin: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use scriptgate_supervisor::job::Maxima;
    use scriptgate_supervisor::{PROTOCOL_VERSION, encode_host_message, encode_job};

    use super::*;

    #[test]
    fn a_one_shot_script_job_and_a_framed_job_are_told_apart_by_their_first_byte() {
        let script = Job {
            version: PROTOCOL_VERSION,
            nonce: "n".into(),
            script: "print(1)".into(),
            stdin: String::new(),
            output_limit: 10,
            artifacts: None,
            enforce: None,
        };
        let mut wire = std::io::Cursor::new(encode_job(&script));
        assert!(matches!(first_message(&mut wire), Ok(First::Script(j)) if j == script));
        let run = RunJob {
            version: PROTOCOL_VERSION,
            nonce: "n".into(),
            // Larger than a frame: it arrives as More frames and a RunJob frame.
            job: serde_json::json!({"padding": "x".repeat(MAX_FRAME + 10)}),
            maxima: Maxima::default(),
            enforce: None,
        };
        let payload = serde_json::to_vec(&run).expect("json");
        let mut wire = std::io::Cursor::new(encode_host_message(HostKind::RunJob, &payload));
        match first_message(&mut wire) {
            Ok(First::RunJob(got, _)) => assert_eq!(*got, run),
            other => panic!("not a job: {other:?}"),
        }
        assert!(matches!(
            first_message(&mut std::io::Cursor::new(Vec::<u8>::new())),
            Ok(First::Closed)
        ));
        let cut = encode_host_message(HostKind::RunJob, &payload);
        assert!(first_message(&mut std::io::Cursor::new(cut[..100].to_vec())).is_err());
        assert!(first_message(&mut std::io::Cursor::new(vec![9, 0, 0, 0, 0])).is_err());
    }
}
