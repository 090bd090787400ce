// go-greeter: a plugin written as go-pdk's examples teach (a Config type,
// New, phase methods, server.StartServer), run by Strait's end-to-end tests
// through Kong's plugin-server protocol (ProtoBuf:1). It reads a request
// header, sets an upstream header, answers with kong.response.exit on a
// condition and logs, and in the log phase logs the status it answered.
package main

import (
	"github.com/Kong/go-pdk"
	"github.com/Kong/go-pdk/server"
)

var Version = "0.1.0"
var Priority = 700

type Config struct {
	Message    string `json:"message"`
	DenyHeader string `json:"deny_header"`
}

func New() interface{} {
	return &Config{}
}

func (conf Config) Access(kong *pdk.PDK) {
	name, err := kong.Request.GetHeader("x-name")
	if err != nil {
		kong.Log.Err("reading x-name: ", err.Error())
		return
	}
	deny := conf.DenyHeader
	if deny == "" {
		deny = "x-deny"
	}
	if denied, _ := kong.Request.GetHeader(deny); denied != "" {
		kong.Response.Exit(403, []byte(`{"message":"denied by go-greeter","who":"`+name+`"}`),
			map[string][]string{"Content-Type": {"application/json"}})
		return
	}
	if name == "" {
		name = "stranger"
	}
	if query, _ := kong.Request.GetHeader("x-query"); query != "" {
		kong.ServiceRequest.SetQuery(map[string][]string{"who": {name}, "asked": {query, "twice"}})
	}
	if err := kong.ServiceRequest.SetHeader("x-greeting", conf.Message+", "+name); err != nil {
		kong.Log.Err("setting x-greeting: ", err.Error())
		return
	}
	kong.Nginx.SetCtx("greeted", name)
	kong.Log.Notice("go-greeter greeted ", name)
}

func (conf Config) Log(kong *pdk.PDK) {
	status, _ := kong.Response.GetStatus()
	name, _ := kong.Request.GetHeader("x-name")
	if name == "" {
		name = "stranger"
	}
	kong.Log.Notice("go-greeter logged ", status, " for ", name)
	// What access kept in ngx.ctx, read after the response.
	if greeted, err := kong.Nginx.GetCtxString("greeted"); err == nil && greeted != "" {
		kong.Log.Notice("go-greeter remembered ", greeted)
	}
}

func main() {
	server.StartServer(New, Version, Priority)
}
