//! Wrapper programs that run another program (`sudo`, `env`, `timeout 5`, `xargs` …): the options
//! and positional arguments that come before the program they run.

pub(super) struct Wrapper {
    /// Options that take a separate value (`sudo -u root`).
    pub(super) value_options: &'static [&'static str],
    /// Options after which the rest is not a command (`command -v ls`).
    pub(super) stop_options: &'static [&'static str],
    /// Positional arguments before the command (`timeout 5 cmd`, `chroot /new cmd`).
    pub(super) positional: usize,
    /// `env X=1 cmd`
    pub(super) env_assignments: bool,
}

pub(super) fn wrapper(name: &str) -> Option<Wrapper> {
    let w = |value_options, positional| Wrapper {
        value_options,
        stop_options: &[],
        positional,
        env_assignments: false,
    };
    Some(match name {
        // `sudo EDITOR=… visudo`: sudo also takes variable assignments before the command
        "sudo" => Wrapper {
            env_assignments: true,
            ..w(
                &[
                    "-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T", "-R",
                ],
                0,
            )
        },
        "doas" => w(&["-u", "-C"], 0),
        "env" => Wrapper {
            value_options: &["-u", "-C", "-S", "--unset", "--chdir", "--split-string"],
            stop_options: &[],
            positional: 0,
            env_assignments: true,
        },
        "nice" => w(&["-n", "--adjustment"], 0),
        "ionice" => w(&["-c", "-n", "--class", "--classdata"], 0),
        "timeout" => w(&["-s", "-k", "--signal", "--kill-after"], 1),
        "nohup" | "setsid" | "builtin" | "unbuffer" | "caffeinate" => w(&[], 0),
        "stdbuf" => w(&["-i", "-o", "-e"], 0),
        "time" => w(&["-f", "-o", "--format", "--output"], 0),
        "command" => Wrapper {
            value_options: &[],
            stop_options: &["-v", "-V"],
            positional: 0,
            env_assignments: false,
        },
        "exec" => w(&["-a"], 0),
        "xargs" => w(
            &[
                "-a",
                "-d",
                "-E",
                "-e",
                "-I",
                "-i",
                "-L",
                "-l",
                "-n",
                "-P",
                "-s",
                "--arg-file",
                "--delimiter",
                "--max-args",
                "--max-procs",
                "--replace",
            ],
            0,
        ),
        // `parallel sh -c '…' ::: a b`: the program is the first word after the options.
        "parallel" | "sem" => w(
            &[
                "-j",
                "--jobs",
                "-S",
                "--sshlogin",
                "--delay",
                "--timeout",
                "--joblog",
                "-a",
                "--arg-file",
                "-d",
                "--delimiter",
                "-I",
                "--results",
                "--tmpdir",
                "-N",
                "-n",
                "--max-args",
            ],
            0,
        ),
        "chroot" => w(&["--userspec", "--groups"], 1),
        "busybox" | "watch" => w(&["-n", "--interval"], 0),
        "strace" | "ltrace" => w(&["-o", "-e", "-p", "-s", "-u"], 0),
        "flock" => w(&["-w", "-E", "--timeout", "--conflict-exit-code"], 1),
        "runuser" => w(&["-u", "-g", "-G", "--user", "--group"], 0),
        "taskset" => Wrapper {
            value_options: &[],
            stop_options: &["-p", "--pid"],
            positional: 1,
            env_assignments: false,
        },
        "chrt" => Wrapper {
            value_options: &["-T", "-P", "-D"],
            stop_options: &["-p", "--pid", "-m", "--max"],
            positional: 1,
            env_assignments: false,
        },
        "unshare" => w(
            &[
                "-S", "-G", "-R", "-w", "--setuid", "--setgid", "--root", "--wd",
            ],
            0,
        ),
        "nsenter" => w(
            &[
                "-t", "--target", "-S", "-G", "--setuid", "--setgid", "-r", "-w", "-N",
            ],
            0,
        ),
        "numactl" => w(&["-C", "-N", "-m", "-p", "-i", "-P"], 0),
        // a cluster's job launchers run the program on the nodes they are given (`srun
        // --overlap timeout 47h python3 - <<EOF`, `mpirun -np 4 ./solver`)
        "srun" => w(
            &[
                "-n",
                "-N",
                "-c",
                "-p",
                "-t",
                "-J",
                "-o",
                "-e",
                "-i",
                "-A",
                "-w",
                "-x",
                "-G",
                "-q",
                "-D",
                "--mem",
                "--gres",
                "--time",
                "--partition",
                "--ntasks",
                "--nodes",
                "--cpus-per-task",
                "--job-name",
                "--output",
                "--error",
                "--input",
                "--account",
                "--nodelist",
                "--exclude",
                "--qos",
                "--mpi",
                "--export",
                "--gpus",
                "--chdir",
            ],
            0,
        ),
        "mpirun" | "mpiexec" => w(
            &[
                "-n",
                "-np",
                "-c",
                "-H",
                "--host",
                "--hostfile",
                "-hostfile",
                "--machinefile",
                "-x",
                "--map-by",
                "--bind-to",
                "-ppn",
                "-npernode",
            ],
            0,
        ),
        "cgexec" => w(&["-g"], 0),
        "setpriv" => w(
            &[
                "--reuid",
                "--regid",
                "--ruid",
                "--rgid",
                "--euid",
                "--egid",
                "--groups",
                "--inh-caps",
                "--ambient-caps",
                "--bounding-set",
                "--securebits",
            ],
            0,
        ),
        "prlimit" => w(&["-p", "--pid"], 0),
        "systemd-run" => w(
            &[
                "-u",
                "--unit",
                "-p",
                "--property",
                "-E",
                "--setenv",
                "--uid",
                "--gid",
                "-M",
                "--machine",
                "--slice",
                "--description",
                "--working-directory",
            ],
            0,
        ),
        "sg" | "faketime" => w(&[], 1),
        "firejail" | "proxychains" | "proxychains4" | "torsocks" | "tsocks" | "eatmydata"
        | "rlwrap" | "catchsegv" | "dbus-launch" | "ssh-agent" => w(&[], 0),
        "xvfb-run" => w(
            &["-n", "-s", "-f", "-e", "--server-num", "--server-args"],
            0,
        ),
        // `op run -- cmd`, `poetry run cmd`, `bundle exec cmd`: a subcommand, then the program.
        "op" | "doppler" | "poetry" | "pipenv" | "uv" | "bundle" | "conda" | "pdm" | "hatch" => {
            w(&["-n", "--name", "-p", "--prefix", "--project"], 1)
        }
        "aws-vault" => w(&[], 2),
        _ => return None,
    })
}
