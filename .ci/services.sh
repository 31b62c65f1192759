#!/usr/bin/env bash
# Starts each service the tests talk to, when it is not answering already, and waits for
# it. The first service that cannot be started or does not answer stops the script with
# a non-zero status and its name, so CI fails here rather than later in a test with a
# connection error that hides the cause.
set -uo pipefail

fail() { # name, what went wrong
  echo "service $1: FAILED: $2" >&2
  exit 1
}

wait_for() { # name, probe command, tries
  local name=$1 probe=$2 tries=${3:-60}
  for _ in $(seq 1 "$tries"); do
    if bash -c "$probe" >/dev/null 2>&1; then
      echo "service $name: up"
      return 0
    fi
    sleep 1
  done
  fail "$name" "not answering after ${tries}s (probe: $probe)"
}

# A start command that exits non-zero is not final on its own (some report an error when
# the service is already starting): the probe that follows decides. A missing command is.
start() { # name, command...
  local name=$1
  shift
  command -v "$1" >/dev/null 2>&1 || fail "$name" "'$1' is not installed"
  "$@" || echo "service $name: '$*' exited with $?; waiting for it to answer anyway" >&2
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Redis, 6379: also needs redis-server and redis-cli on the PATH for the Cluster and outage suites.
command -v redis-cli >/dev/null 2>&1 || fail redis "'redis-cli' is not installed (the Cluster and outage tests need redis-server and redis-cli)"
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  mkdir -p /var/lib/redis /var/log/redis
  start redis redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
wait_for redis "redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG"

# PostgreSQL, 5432: user postgres (trust), database test.
if ! pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then
  [ -d /etc/postgresql ] || fail postgresql "no cluster under /etc/postgresql"
  start postgresql pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
fi
wait_for postgresql "pg_isready -h 127.0.0.1 -p 5432"
if ! psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1; then
  psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test" >/dev/null || fail postgresql "cannot create database test"
fi
psql -h 127.0.0.1 -U postgres -d test -tAc "SELECT 1" >/dev/null || fail postgresql "user postgres cannot connect to database test"

# RabbitMQ, 5672: guest/guest, vhost /.
if ! port_open 5672; then start rabbitmq rabbitmq-server -detached; fi
wait_for rabbitmq "(exec 3<>/dev/tcp/127.0.0.1/5672)" 120
# The sample app's e2e test counts unacknowledged messages with it (AMQP reports only ready ones).
rabbitmqctl list_queues --quiet --no-table-headers name >/dev/null 2>&1 || fail rabbitmq "'rabbitmqctl list_queues' does not work here (the sample app e2e test needs it)"

# NATS with JetStream, 4222.
if ! port_open 4222; then
  start nats start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
fi
wait_for nats "(exec 3<>/dev/tcp/127.0.0.1/4222)"

# MariaDB (or MySQL), 3306: root with an empty password, database test (the TypeORM MySQL/MariaDB suites).
mysql_client=$(command -v mariadb || command -v mysql) || fail mariadb "neither 'mariadb' nor 'mysql' (the client) is installed"
mysql_ping() { "$mysql_client" -h 127.0.0.1 -P 3306 -u root --connect-timeout=2 -e 'SELECT 1' >/dev/null 2>&1; }
if ! mysql_ping; then
  [ -x /usr/sbin/mariadbd ] || fail mariadb "not answering on 127.0.0.1:3306 and /usr/sbin/mariadbd is not installed"
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null
  start mariadb start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
fi
wait_for mariadb "$mysql_client -h 127.0.0.1 -P 3306 -u root --connect-timeout=2 -e 'SELECT 1'"
"$mysql_client" -h 127.0.0.1 -P 3306 -u root -e 'CREATE DATABASE IF NOT EXISTS test' >/dev/null 2>&1 ||
  fail mariadb "user root (empty password) cannot create database test on 127.0.0.1:3306"
"$mysql_client" -h 127.0.0.1 -P 3306 -u root -D test -e 'SELECT 1' >/dev/null 2>&1 || fail mariadb "user root cannot connect to database test"

echo "services: all up"
