// A proxy-wasm filter for Strait's tests and benches, on the proxy-wasm Go
// SDK, built with standard Go for wasip1 (scripts/test.sh). What it does is
// set by its configuration (strait-test-filter.meta.json has the schema):
//
//   - header/value: adds request header <header>: <value>[|<x-wasm-in>]
//     (what the request's x-wasm-in header held, when it has one);
//   - deny_header: a request carrying that header is answered locally
//     with 403 "denied by wasm" and x-wasm-denied: 1;
//   - route_header: the request gets <route_header>: <kong.route_id>;
//   - response_header: added to every response (value "1");
//   - body_from/body_to: the whole response body, held back until its end,
//     has every body_from replaced by body_to;
//   - fail: "panic" panics in the request-headers callback (a trap),
//     "loop" loops there forever (the host's time budget ends it),
//     "memory" allocates 1 GiB there (past the host's memory limit);
//   - log: logs every request's path at info level;
//   - tick_ms/ticks_header: the plugin context asks for a tick every tick_ms
//     and counts them; requests get <ticks_header>: <ticks so far>;
//   - count_header: counts requests in the worker's shared data (key
//     "count", set with compare-and-swap); requests get <count_header>:
//     <count>;
//   - call_upstream/call_path: the request waits for a GET of call_path on
//     call_upstream (host:port) and gets x-wasm-call-status and
//     x-wasm-call-bytes (the answer's status and body length); a request
//     carrying x-wasm-call-deny is answered 401 when the call's status is
//     not 200.
package main

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

type config struct {
	Header         string `json:"header"`
	Value          string `json:"value"`
	DenyHeader     string `json:"deny_header"`
	RouteHeader    string `json:"route_header"`
	ResponseHeader string `json:"response_header"`
	BodyFrom       string `json:"body_from"`
	BodyTo         string `json:"body_to"`
	Fail           string `json:"fail"`
	Log            bool   `json:"log"`
	TickMs         uint32 `json:"tick_ms"`
	TicksHeader    string `json:"ticks_header"`
	CountHeader    string `json:"count_header"`
	CallUpstream   string `json:"call_upstream"`
	CallPath       string `json:"call_path"`
}

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext { return &plugin{} })
}

type plugin struct {
	types.DefaultPluginContext
	config config
	ticks  int
}

func (p *plugin) OnPluginStart(size int) types.OnPluginStartStatus {
	if size == 0 {
		return types.OnPluginStartStatusOK
	}
	raw, err := proxywasm.GetPluginConfiguration()
	if err != nil {
		proxywasm.LogErrorf("reading the configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	if err := json.Unmarshal(raw, &p.config); err != nil {
		proxywasm.LogErrorf("parsing the configuration %q: %v", raw, err)
		return types.OnPluginStartStatusFailed
	}
	if p.config.TickMs > 0 {
		if err := proxywasm.SetTickPeriodMilliSeconds(p.config.TickMs); err != nil {
			proxywasm.LogErrorf("setting the tick period: %v", err)
			return types.OnPluginStartStatusFailed
		}
	}
	return types.OnPluginStartStatusOK
}

func (p *plugin) OnTick() {
	p.ticks++
}

func (p *plugin) NewHttpContext(uint32) types.HttpContext {
	return &request{config: &p.config, plugin: p}
}

type request struct {
	types.DefaultHttpContext
	config *config
	plugin *plugin
	loops  int
}

func (r *request) OnHttpRequestHeaders(int, bool) types.Action {
	c := r.config
	switch c.Fail {
	case "panic":
		panic("strait-test-filter: asked to fail")
	case "loop":
		for {
			r.loops++
		}
	case "memory":
		hoard := make([]byte, 1<<30)
		hoard[len(hoard)-1] = 1
		r.loops += int(hoard[len(hoard)-1])
	}
	if c.Log {
		path, _ := proxywasm.GetHttpRequestHeader(":path")
		proxywasm.LogInfof("strait-test-filter saw %s", path)
	}
	if c.DenyHeader != "" {
		if _, err := proxywasm.GetHttpRequestHeader(c.DenyHeader); err == nil {
			headers := [][2]string{{"content-type", "text/plain"}, {"x-wasm-denied", "1"}}
			if err := proxywasm.SendHttpResponse(403, headers, []byte("denied by wasm\n"), -1); err != nil {
				proxywasm.LogErrorf("local response: %v", err)
			}
			return types.ActionPause
		}
	}
	if c.Header != "" {
		value := c.Value
		if in, err := proxywasm.GetHttpRequestHeader("x-wasm-in"); err == nil {
			value += "|" + in
		}
		if err := proxywasm.ReplaceHttpRequestHeader(c.Header, value); err != nil {
			proxywasm.LogErrorf("setting %s: %v", c.Header, err)
		}
	}
	if c.TicksHeader != "" {
		_ = proxywasm.ReplaceHttpRequestHeader(c.TicksHeader, strconv.Itoa(r.plugin.ticks))
	}
	if c.RouteHeader != "" {
		route, err := proxywasm.GetProperty([]string{"kong", "route_id"})
		if err == nil {
			_ = proxywasm.ReplaceHttpRequestHeader(c.RouteHeader, string(route))
		}
	}
	if c.CountHeader != "" {
		_ = proxywasm.ReplaceHttpRequestHeader(c.CountHeader, strconv.Itoa(count()))
	}
	if c.CallUpstream != "" {
		return r.call()
	}
	return types.ActionContinue
}

// count adds one to the worker's shared "count" (retrying on a CAS
// mismatch) and returns the new value.
func count() int {
	for {
		value, cas, err := proxywasm.GetSharedData("count")
		n := 0
		if err == nil {
			n, _ = strconv.Atoi(string(value))
		}
		n++
		if err := proxywasm.SetSharedData("count", []byte(strconv.Itoa(n)), cas); err == nil {
			return n
		}
	}
}

func (r *request) call() types.Action {
	_, strict := proxywasm.GetHttpRequestHeader("x-wasm-call-deny")
	headers := [][2]string{{":method", "GET"}, {":path", r.config.CallPath}, {":authority", "wasm-call"}}
	_, err := proxywasm.DispatchHttpCall(r.config.CallUpstream, headers, nil, nil, 5000, func(_, size, _ int) {
		status := ""
		answer, _ := proxywasm.GetHttpCallResponseHeaders()
		for _, header := range answer {
			if header[0] == ":status" {
				status = header[1]
			}
		}
		body, _ := proxywasm.GetHttpCallResponseBody(0, size)
		if strict == nil && status != "200" {
			_ = proxywasm.SendHttpResponse(401, nil, []byte("call answered "+status+"\n"), -1)
			return
		}
		_ = proxywasm.ReplaceHttpRequestHeader("x-wasm-call-status", status)
		_ = proxywasm.ReplaceHttpRequestHeader("x-wasm-call-bytes", strconv.Itoa(len(body)))
		_ = proxywasm.ResumeHttpRequest()
	})
	if err != nil {
		proxywasm.LogErrorf("dispatching the call: %v", err)
		return types.ActionContinue
	}
	return types.ActionPause
}

func (r *request) OnHttpResponseHeaders(int, bool) types.Action {
	if r.config.ResponseHeader != "" {
		_ = proxywasm.AddHttpResponseHeader(r.config.ResponseHeader, "1")
	}
	if r.config.BodyFrom != "" {
		_ = proxywasm.RemoveHttpResponseHeader("content-length")
	}
	return types.ActionContinue
}

func (r *request) OnHttpResponseBody(size int, end bool) types.Action {
	if r.config.BodyFrom == "" {
		return types.ActionContinue
	}
	if !end {
		return types.ActionPause
	}
	body, err := proxywasm.GetHttpResponseBody(0, size)
	if err != nil {
		proxywasm.LogErrorf("reading the body: %v", err)
		return types.ActionContinue
	}
	rewritten := strings.ReplaceAll(string(body), r.config.BodyFrom, r.config.BodyTo)
	if err := proxywasm.ReplaceHttpResponseBody([]byte(rewritten)); err != nil {
		proxywasm.LogErrorf("replacing the body: %v", err)
	}
	return types.ActionContinue
}
