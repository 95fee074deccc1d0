#!/bin/sh
# Makes the sandbox host's TLS from a private certificate authority:
#
#   sandboxd-certs.sh [--key-owner UID] TLS_DIR CA_DIR NAME...
#
# TLS_DIR gets tls.crt and tls.key, the pair flotilla-sandboxd serves
# (FLOTILLA_SANDBOXD_TLS_CERT, _KEY); CA_DIR gets ca.crt, which workers
# verify the host against (FLOTILLA_SANDBOXD_CA_CERT). Each NAME is an
# address the workers reach the host at, `DNS:<name>` or `IP:<address>`
# (compose: DNS:sandboxd; Kubernetes: IP:<address> of every node). The
# authority's own key is thrown away once the certificate is signed: a new
# certificate means a new authority, and the workers' ca.crt with it.
# `--key-owner` gives tls.key to the host's user (uid 10001 in the image)
# when this runs as root. When both outputs exist already nothing is made,
# so a one-shot service may run it at every start.
set -eu

owner=""
if [ "${1:-}" = "--key-owner" ]; then
  owner=${2:?--key-owner needs a uid}
  shift 2
fi
if [ "$#" -lt 3 ]; then
  echo "usage: sandboxd-certs.sh [--key-owner UID] TLS_DIR CA_DIR NAME..." >&2
  exit 2
fi
tls_dir=$1
ca_dir=$2
shift 2
names=""
for name in "$@"; do
  case "$name" in
    DNS:?* | IP:?*) names="${names:+$names,}$name" ;;
    *)
      echo "sandboxd-certs.sh: $name is neither DNS:<name> nor IP:<address>" >&2
      exit 2
      ;;
  esac
done

if [ -s "$tls_dir/tls.crt" ] && [ -s "$tls_dir/tls.key" ] && [ -s "$ca_dir/ca.crt" ]; then
  echo "sandboxd-certs.sh: $tls_dir and $ca_dir hold a certificate already; nothing made"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
openssl req -x509 -newkey rsa:3072 -nodes -days 825 -subj "/CN=flotilla-sandboxd-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -keyout "$work/ca.key" -out "$work/ca.crt" 2>/dev/null
openssl req -newkey rsa:3072 -nodes -subj "/CN=flotilla-sandboxd" \
  -keyout "$work/tls.key" -out "$work/tls.csr" 2>/dev/null
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' \
  "$names" >"$work/ext.cnf"
openssl x509 -req -days 825 -in "$work/tls.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" -CAcreateserial \
  -extfile "$work/ext.cnf" -out "$work/tls.crt" 2>/dev/null

mkdir -p "$tls_dir" "$ca_dir"
install -m 0444 "$work/ca.crt" "$ca_dir/ca.crt"
install -m 0444 "$work/tls.crt" "$tls_dir/tls.crt"
install -m 0400 "$work/tls.key" "$tls_dir/tls.key"
if [ -n "$owner" ]; then
  chown "$owner" "$tls_dir/tls.key"
fi
echo "sandboxd-certs.sh: made $tls_dir/tls.crt for $names, signed by a new authority in $ca_dir/ca.crt"
