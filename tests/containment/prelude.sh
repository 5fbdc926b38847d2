errname() {
  case "$1" in
    *"Read-only file system"*) echo EROFS ;;
    *"Permission denied"*) echo EACCES ;;
    *"Operation not permitted"*) echo EPERM ;;
    *"No such file or directory"*) echo ENOENT ;;
    *"No space left on device"*) echo ENOSPC ;;
    *"Argument list too long"*) echo E2BIG ;;
    *"Network is unreachable"*) echo ENETUNREACH ;;
    *"Connection refused"*) echo ECONNREFUSED ;;
    *"Cannot assign requested address"*) echo EADDRNOTAVAIL ;;
    *"File too large"*) echo EFBIG ;;
    *"Invalid cross-device link"*) echo EXDEV ;;
    *"Resource temporarily unavailable"*) echo EAGAIN ;;
    *) echo "UNRECOGNISED[${1//$'\n'/ }]" ;;
  esac
}
# Runs a command that must fail: prints BLOCKED:<probe>:<errno name>, or ESCAPED when it worked.
attempt() {
  local probe=$1 out
  shift
  if out=$("$@" 2>&1); then
    echo "ESCAPED:$probe:${out:0:200}"
  else
    echo "BLOCKED:$probe:$(errname "$out")"
  fi
}

