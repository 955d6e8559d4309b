# chio-ledger/chio:dev: the static chio binary (CGO_ENABLED=0) alone.
# Built by scripts/images.sh from a context it stages under
# .artifacts/images/context/chio: nothing is pulled, FROM scratch.
#
# The relative defaults (--data-dir .chio) resolve under /data, where to
# mount a volume; /data and /tmp are mode 1777, so any --user can write
# them. No CA certificates: push notifications to https webhooks need a
# bundle mounted at /etc/ssl/certs/ca-certificates.crt.
FROM scratch
COPY dirs/ /
COPY chio /chio
ENV HOME=/data
WORKDIR /data
ENTRYPOINT ["/chio"]
