// go-seen: bench/scenarios/pluginserver_cost.py's Go plugin on go-pdk. Its access phase does
// what lua-cost's pre-function does: reads one request header, sets one upstream header.
package main

import (
	"github.com/Kong/go-pdk"
	"github.com/Kong/go-pdk/server"
)

type Config struct{}

func New() interface{} {
	return &Config{}
}

func (conf Config) Access(kong *pdk.PDK) {
	accept, err := kong.Request.GetHeader("accept")
	if err != nil || accept == "" {
		accept = "none"
	}
	kong.ServiceRequest.SetHeader("x-seen", accept)
}

func main() {
	server.StartServer(New, "0.1.0", 1000)
}
