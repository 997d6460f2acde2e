# shellcheck shell=bash
# Ports. Sourced.

# free_port: a TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick), printed.
# $PYTHON is the interpreter if set (tests/clients/check.sh's), else python3.
free_port() {
  "${PYTHON:-python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
