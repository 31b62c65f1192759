#!/usr/bin/env bash
# Starts each service the tests talk to, when it is not answering already, and waits for it.
set -u

wait_for() { # name, probe command, tries
  local name=$1 probe=$2 tries=${3:-60}
  for _ in $(seq 1 "$tries"); do
    if bash -c "$probe" >/dev/null 2>&1; then echo "service $name: up"; return 0; fi
    sleep 1
  done
  echo "service $name: NOT answering after ${tries}s" >&2
  return 1
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
wait_for redis "redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG"

if ! pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
fi
wait_for postgresql "pg_isready -h 127.0.0.1 -p 5432"
psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1 || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test"

if ! port_open 5672; then rabbitmq-server -detached || true; fi
wait_for rabbitmq "(exec 3<>/dev/tcp/127.0.0.1/5672)" 120

if ! port_open 4222; then
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
fi
wait_for nats "(exec 3<>/dev/tcp/127.0.0.1/4222)"
