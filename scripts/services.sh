#!/usr/bin/env bash
# Start the machine's PostgreSQL, Redis and RabbitMQ if they are not running (the commands
# of the python-svc machines this project is developed and tested on). Tests start private
# servers of their own where they kill one; these shared ones are only ever read and
# written through fresh databases, a private Redis and virtual hosts of their own.
set -u

if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    echo "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
  else
    echo "PostgreSQL is not running on 127.0.0.1:5432 and cannot be started here" >&2
  fi
fi

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  if command -v redis-server >/dev/null; then
    echo "starting Redis"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
      --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
  else
    echo "Redis is not running on 127.0.0.1:6379 and redis-server is not installed" >&2
  fi
fi

rabbit_up() { python3 -c 'import socket; socket.create_connection(("127.0.0.1", 5672), 1)' 2>/dev/null; }
if ! rabbit_up; then
  if command -v rabbitmq-server >/dev/null; then
    echo "starting RabbitMQ"
    (rabbitmq-server >/dev/null 2>&1 &)
    for _ in $(seq 120); do rabbit_up && break; sleep 0.5; done
  else
    echo "RabbitMQ is not running on 127.0.0.1:5672 and rabbitmq-server is not installed" >&2
  fi
fi

for _ in $(seq 50); do
  pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null && break
  sleep 0.2
done
exit 0
