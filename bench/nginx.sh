#!/usr/bin/env bash
# A private nginx for the crawl benchmark: serves the site bench/site.py generated, one server per
# host on 127.0.0.2.., port 8080, no access log, files cached. Installs Debian's nginx-light when run
# as root on a machine without nginx.
#   bench/nginx.sh start | stop | config        (environment: SITE=/tmp/perfsite HOSTS=8 PORT=8080 WORKERS=2)
set -euo pipefail
site=${SITE:-/tmp/perfsite}
hosts=${HOSTS:-8}
port=${PORT:-8080}
workers=${WORKERS:-2}
config=$site/bench-nginx.conf
pidfile=$site/bench-nginx.pid

config() {
  mkdir -p "$site/nginx/logs" "$site/nginx/tmp"
  cat > "$config" <<CONF
worker_processes $workers;
pid $pidfile;
error_log $site/nginx/logs/error.log warn;
events { worker_connections 8192; multi_accept on; }
http {
  access_log off;
  sendfile on; tcp_nopush on; tcp_nodelay on;
  keepalive_timeout 65; keepalive_requests 1000000;
  open_file_cache max=50000 inactive=300s; open_file_cache_valid 300s;
  default_type text/html; etag off;
  client_body_temp_path $site/nginx/tmp; proxy_temp_path $site/nginx/tmp; fastcgi_temp_path $site/nginx/tmp;
  uwsgi_temp_path $site/nginx/tmp; scgi_temp_path $site/nginx/tmp;
CONF
  for ((h = 0; h < hosts; h++)); do
    echo "  server { listen 127.0.0.$((h + 2)):$port; root $site/www/h$h; location / { try_files \$uri =404; } }" >> "$config"
  done
  echo "}" >> "$config"
}

install() {
  if command -v nginx > /dev/null 2>&1; then return; fi
  if [ "$(id -u)" != 0 ]; then
    echo "nginx is missing: install Debian's nginx-light (apt-get install nginx-light)" >&2
    exit 1
  fi
  echo "installing Debian's nginx-light for the crawl benchmark"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq nginx-light > /dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq nginx-light > /dev/null; }
}

case "${1:-}" in
  config) config; cat "$config" ;;
  start)
    install
    config
    nginx -p "$site/nginx" -c "$config"
    sleep 0.5
    echo "bench nginx running (pid $(cat "$pidfile")) on 127.0.0.2-$((hosts + 1)):$port"
    ;;
  stop)
    if [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2> /dev/null; then echo "bench nginx stopped"; else echo "bench nginx was not running"; fi
    rm -f "$pidfile"
    ;;
  *) echo "usage: $0 start|stop|config" >&2; exit 2 ;;
esac
