# chio-ledger/caddy:dev: the standard Caddy v2 binary built from the
# deploy/caddy module, with deploy/caddy/Caddyfile at /etc/caddy/Caddyfile.
# Built by scripts/images.sh, FROM scratch. No CA certificates: it serves
# TLS with the cluster's own certificate, mounted at /etc/caddy-tls
# (auto_https is off in the Caddyfile).
#
# Caddy keeps its state (instance id, locks) under XDG_DATA_HOME/caddy and
# XDG_CONFIG_HOME/caddy, both in the writable /data.
FROM scratch
COPY dirs/ /
COPY Caddyfile /etc/caddy/Caddyfile
COPY caddy /caddy
ENV HOME=/data XDG_DATA_HOME=/data XDG_CONFIG_HOME=/data
WORKDIR /data
EXPOSE 8443
ENTRYPOINT ["/caddy"]
CMD ["run", "--config", "/etc/caddy/Caddyfile", "--adapter", "caddyfile"]
