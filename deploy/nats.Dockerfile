# chio-ledger/nats:dev: the static nats-server binary at the version the
# main module pins (go.mod), with the cluster configs of deploy/nats baked
# in at /etc/nats. Built by scripts/images.sh, FROM scratch.
#
#   docker run chio-ledger/nats:dev -c /etc/nats/nats-1.conf   # a cluster node
#   docker run chio-ledger/nats:dev                            # one JetStream node:
#                                     -js -sd /data/jetstream -m 8222 (monitoring)
FROM scratch
COPY dirs/ /
COPY nats/ /etc/nats/
COPY nats-server /nats-server
ENV HOME=/data
WORKDIR /data
EXPOSE 4222 6222 8222
ENTRYPOINT ["/nats-server"]
CMD ["-js", "-sd", "/data/jetstream", "-m", "8222"]
