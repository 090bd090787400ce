# Configurations shared by the hand-run HTTP/1.1 scripts (h1-ab.sh, h1-instructions.sh,
# spikes/h1-floor/run.sh); sourced, not run. The lab writes its own (lab/systems.py).

# origin_conf DIR PORT: DIR/origin.conf, nginx answering `200 ok` on 127.0.0.1:PORT with
# one worker, keep-alive without a request limit; pid in DIR/origin.pid.
origin_conf() {
    cat >"$1/origin.conf" <<CONF
worker_processes 1; error_log $1/origin-error.log; pid $1/origin.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$2 backlog=4096; location / { return 200 'ok'; } } }
CONF
}

# proxy_conf DIR PORT ORIGIN_PORT [ACCESS_LOG]: DIR/proxy.conf, nginx proxying 127.0.0.1:PORT to
# the origin with one worker and upstream keep-alive; pid in DIR/proxy.pid. ACCESS_LOG=1 writes
# DIR/proxy-access.log in Kong's access-log format (nginx's $request_id for Kong's request id),
# buffered 64 KiB as nginx is usually run; else no access log.
proxy_conf() {
    local access="access_log off;"
    if [ "${4:-0}" = 1 ]; then
        access="log_format kong '\$remote_addr - \$remote_user [\$time_local] \"\$request\" \$status \$body_bytes_sent \"\$http_referer\" \"\$http_user_agent\" kong_request_id: \"\$request_id\"';
  access_log $1/proxy-access.log kong buffer=64k flush=100ms;"
    fi
    cat >"$1/proxy.conf" <<CONF
worker_processes 1; error_log $1/proxy-error.log; pid $1/proxy.pid;
events { worker_connections 4096; }
http { $access keepalive_requests 1000000; keepalive_timeout 120s;
  upstream origin { server 127.0.0.1:$3; keepalive 64; keepalive_requests 1000000; }
  server { listen 127.0.0.1:$2 backlog=4096;
    location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
CONF
}

# kong_json DIR ORIGIN_PORT: DIR/kong.json, Strait's declarative configuration with one
# service to the origin and one route for every path.
kong_json() {
    printf '{"_format_version": "3.0", "services": [{"name": "origin", "url": "http://127.0.0.1:%s", "routes": [{"name": "all", "paths": ["/"]}]}]}\n' "$2" >"$1/kong.json"
}
