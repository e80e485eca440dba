#!/usr/bin/env bash
# Test certificates for config/cluster-secured/ (or any TLS listener), with the openssl CLI:
# one CA, then a PKCS12 keystore per node whose certificate names its loopback address, and a
# PEM client certificate for the admin.
#   scripts/make-certs.sh [DIR]           # default ./secrets
#   KEYSTORE_PASSWORD=... scripts/make-certs.sh
# Writes DIR/ca.pem (the truststore, ssl.truststore.type=PEM), DIR/<node>.p12
# (ssl.keystore.type=PKCS12, password $KEYSTORE_PASSWORD), DIR/admin.pem + DIR/admin.key.
# For production, use certificates from your own CA; these are valid for 365 days.
set -euo pipefail
DIR=${1:-./secrets}
PASSWORD=${KEYSTORE_PASSWORD:-changeit}
mkdir -p "$DIR"
cd "$DIR"
umask 077
CURVE=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
if [[ ! -f ca.key ]]; then
  openssl req -x509 "${CURVE[@]}" -keyout ca.key -out ca.pem -days 365 \
    -subj "/O=kraft-py/CN=kraft-py test CA" 2>/dev/null
fi
issue() {  # name, subjectAltName
  local name=$1 san=$2
  openssl req -new "${CURVE[@]}" -keyout "$name.key" -out "$name.csr" \
    -subj "/O=kraft-py/CN=$name" 2>/dev/null
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
    -out "$name.pem" -extfile <(printf 'subjectAltName=%s\n' "$san") 2>/dev/null
  rm -f "$name.csr"
}
for node in 1 2 3; do
  issue "controller-$node" "IP:127.0.0.$node,DNS:localhost"
done
for node in 4 5 6; do
  issue "broker-$node" "IP:127.0.0.$node,DNS:localhost"
done
for name in controller-1 controller-2 controller-3 broker-4 broker-5 broker-6; do
  openssl pkcs12 -export -inkey "$name.key" -in "$name.pem" -certfile ca.pem \
    -name "$name" -passout "pass:$PASSWORD" -out "$name.p12"
  rm -f "$name.key" "$name.pem"
done
issue admin "DNS:admin"
echo "wrote $(pwd): ca.pem, controller-{1,2,3}.p12, broker-{4,5,6}.p12, admin.pem, admin.key"
