package host_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host"
)

// wants is a describe that asks for one of everything: the queue it consumes, a queue it
// submits to, and a pool.
func wants(typ string) abi.Describe {
	d := batchDescribe(typ, typ+"-q", anyObject)
	d.Submits = []abi.QueueContract{{Name: "results", Payload: json.RawMessage(anyObject)}}
	d.Pools = []abi.PoolContract{{Name: "cookies", Payload: json.RawMessage(anyObject), Tags: json.RawMessage(anyObject)}}
	return d
}

// TestGrantMissing: a plugin asking for more than it is granted does not start, and the
// error lists every missing grant as the grants file spells it, with what asks for it.
func TestGrantMissing(t *testing.T) {
	tests := []struct {
		name  string
		grant host.Grant
		want  []string // each missing grant, in order
	}{
		{"nothing granted", host.Grant{}, []string{
			`"pools": {"cookies": [one or more of "put", "claim", "list", "mark_bad"]} (it uses pool "cookies")`,
			`"queues": {"results": ["submit"]} (it submits to queue "results")`,
			`"queues": {"w-q": ["consume"]} (it consumes queue "w-q")`,
		}},
		{"submit where it consumes", host.Grant{
			Pools:  map[string][]string{"cookies": {"list"}},
			Queues: map[string][]string{"w-q": {"submit"}, "results": {"consume"}},
		}, []string{
			`"queues": {"results": ["submit"]} (it submits to queue "results")`,
			`"queues": {"w-q": ["consume"]} (it consumes queue "w-q")`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			d := wants("w")
			watPlugin(t, r.dir, "done", "w", d)
			r.cfg.PluginsDir = r.dir
			r.cfg.Grants = map[string]host.Grant{"w": tt.grant}
			_, err := host.New(context.Background(), r.cfg)
			if err == nil {
				t.Fatal("host.New started a plugin that asks for more than it is granted")
			}
			want := `host: plugin w.wasm: type "w" is not granted what it declares; add to its entry in the grants file: ` +
				strings.Join(tt.want, "; ") + "; or, for development only, run with --grant-declared"
			if err.Error() != want {
				t.Errorf("host.New =\n  %v\nwant\n  %s", err, want)
			}
			if got := host.MissingGrants(&d, tt.grant); !slices.Equal(got, tt.want) {
				t.Errorf("MissingGrants = %q, want %q", got, tt.want)
			}
			if _, found, _ := r.backend.KVGet(context.Background(), "fleet-contracts", "queue:w-q"); found {
				t.Error("a plugin that did not start recorded its contract")
			}
		})
	}
}

// TestGrantDeclared: Config.GrantDeclared gives each plugin what it declares, on top of
// its grant, and says so with a WARN per plugin naming what it got that way.
func TestGrantDeclared(t *testing.T) {
	r := newRig(t)
	watPlugin(t, r.dir, "done", "w", wants("w"))
	watPlugin(t, r.dir, "done", "x", batchDescribe("x", "x-q", anyObject))
	watPlugin(t, r.dir, "done", "y", batchDescribe("y", "y-q", anyObject))
	r.cfg.PluginsDir = r.dir
	r.cfg.GrantDeclared = true
	r.cfg.Grants = map[string]host.Grant{"w": {Pools: map[string][]string{"cookies": {"claim"}}}, "y": consumer("y-q")}
	h, err := host.New(context.Background(), r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	got := map[string]host.Grant{}
	for _, p := range h.Plugins() {
		got[p.Type] = p.Grant
	}
	if g := got["w"]; !slices.Equal(g.Pools["cookies"], []string{"claim"}) || !slices.Equal(g.Queues["w-q"], []string{"consume"}) ||
		!slices.Equal(g.Queues["results"], []string{"submit"}) {
		t.Errorf("w's grant = %+v, want its granted pool role kept and its queues granted as declared", g)
	}
	logs := r.logs.String()
	for _, w := range []string{
		`level=WARN msg="host: --grant-declared grants this plugin what it declares, beyond the grants file; for development only" type=w granted="queues \"results\": submit; queues \"w-q\": consume"`,
		`type=x granted="queues \"x-q\": consume"`,
	} {
		if !strings.Contains(logs, w) {
			t.Errorf("logs lack %s; logs:\n%s", w, logs)
		}
	}
	if strings.Contains(logs, "type=y granted") {
		t.Errorf("y, granted what it declares by the grants file, was said to get more; logs:\n%s", logs)
	}
}

// TestContractOwners: only a queue's consumer and a pool's putter record its contract
// for the fleet. A plugin that only submits to the queue, or only claims from the pool,
// checks its own against the record, and when there is none yet writes nothing, so that
// the owner, starting later with another schema, is not refused.
func TestContractOwners(t *testing.T) {
	r := newRedisRig(t)
	ctx := context.Background()
	d := abi.Describe{ABIVersion: abi.Version, Type: "user", Version: "0.1.0", Mode: abi.ModeLoop,
		Submits: []abi.QueueContract{{Name: "jobs", Payload: json.RawMessage(`{"type":"array"}`)}},
		Pools:   []abi.PoolContract{{Name: "cookies", Payload: json.RawMessage(`{"type":"array"}`), Tags: json.RawMessage(`{}`)}}}
	userDir, ownerDir := t.TempDir(), t.TempDir()
	watPlugin(t, userDir, "done", "user", d)
	owner := batchDescribe("owner", "jobs", `{"type":"object"}`)
	owner.Pools = []abi.PoolContract{{Name: "cookies", Payload: json.RawMessage(`{"type":"object"}`), Tags: json.RawMessage(`{}`)}}
	watPlugin(t, ownerDir, "done", "owner", owner)
	cfg := r.cfg
	cfg.Grants = map[string]host.Grant{
		"user": {Queues: map[string][]string{"jobs": {"submit"}}, Pools: map[string][]string{"cookies": {"claim", "list", "mark_bad"}}},
		// the owner is granted everything but put: it owns the queue, not the pool
		"owner": {Queues: map[string][]string{"jobs": {"consume"}}, Pools: map[string][]string{"cookies": {"claim"}}},
	}
	cfg.PluginsDir = userDir
	hu, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	hu.Close()
	for _, key := range []string{"queue:jobs", "pool:cookies"} {
		if v, found, _ := r.backend.KVGet(ctx, "fleet-contracts", key); found {
			t.Errorf("a plugin that does not own %s recorded it: %s", key, v)
		}
	}
	cfg.PluginsDir = ownerDir
	ho, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatalf("the owner, starting after a user with another schema, was refused: %v", err)
	}
	ho.Close()
	if v := latestSchema(t, r.backend, "queue:jobs"); v != `{"type":"object"}` {
		t.Errorf("queue:jobs record = %s; want the consumer's schema", v)
	}
	if v, found, _ := r.backend.KVGet(ctx, "fleet-contracts", "pool:cookies"); found {
		t.Errorf("a plugin not granted put on the pool recorded it: %s", v)
	}
	// A putter records the pool; the user, starting again, is checked against both.
	cfg.Grants["owner"] = host.Grant{Queues: map[string][]string{"jobs": {"consume"}}, Pools: map[string][]string{"cookies": {"put"}}}
	if ho, err = host.New(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	ho.Close()
	if v, found, _ := r.backend.KVGet(ctx, "fleet-contracts", "pool:cookies"); !found || !strings.Contains(string(v), `"payload_schema":{"type":"object"}`) {
		t.Errorf("pool:cookies record = %s, %v; want the putter's schemas", v, found)
	}
	cfg.PluginsDir = userDir
	if _, err := host.New(ctx, cfg); err == nil || !strings.Contains(err.Error(), "the fleet") {
		t.Errorf("host.New(user, against the owner's record) = %v, want a fleet contract conflict", err)
	}
}

// TestTypeNames: a type holds letters, digits, '-', '_' and '.' only, so that no type's
// default grant "<type>:*" covers another type's names; a plugin or a grant naming one
// with ':' or '/' is refused, naming it. "shop", "shop-eu" and "shop.eu" load together,
// each with its own default patterns.
func TestTypeNames(t *testing.T) {
	for _, typ := range []string{"shop:eu", "shop/eu", "shop@eu"} {
		t.Run(typ, func(t *testing.T) {
			r := newRig(t)
			r.wat("done", "bad", batchDescribe(typ, "q", anyObject))
			r.cfg.PluginsDir = r.dir
			r.cfg.Grants = nil
			_, err := host.New(context.Background(), r.cfg)
			want := `host: plugin bad.wasm: type "` + typ + `" has '` + typ[4:5] + `' at 4; a type is letters, digits, '-', '_' and '.' only`
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("host.New = %v, want %s...", err, want)
			}
			if _, err := host.Describe(context.Background(), r.dir+"/bad.wasm", cacheDir, 0); err == nil || !strings.Contains(err.Error(), "a type is letters") {
				t.Errorf("host.Describe = %v, want the type refused", err)
			}
			r.cfg.Grants = map[string]host.Grant{typ: {}}
			if _, err := host.New(context.Background(), r.cfg); err == nil || !strings.Contains(err.Error(), `Config.Grants["`+typ+`"]: type`) {
				t.Errorf("host.New(Grants[%q]) = %v, want the grant's type refused", typ, err)
			}
		})
	}
	r := newRig(t)
	for _, typ := range []string{"shop", "shop-eu", "shop.eu", "Shop_EU2"} {
		r.wat("done", typ, batchDescribe(typ, typ+"-q", anyObject))
	}
	r.cfg.PluginsDir = r.dir
	h, err := host.New(context.Background(), r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, p := range h.Plugins() {
		if want := []string{p.Type + ":*"}; !slices.Equal(p.Grant.KV, want) {
			t.Errorf("%s: KV = %q, want %q", p.Type, p.Grant.KV, want)
		}
	}
}

// TestGrantRolesChecked: a role a pool or queue does not have, or none, is refused by
// New, naming the grant.
func TestGrantRolesChecked(t *testing.T) {
	r := newRig(t)
	r.wat("done", "w", batchDescribe("w", "w-q", anyObject))
	r.cfg.PluginsDir = r.dir
	for g, want := range map[*host.Grant]string{
		{Pools: map[string][]string{"p": {"consume"}}}:   `host: Config.Grants["w"]: pools["p"]: "consume" is not a role here; the roles are put, claim, list, mark_bad`,
		{Queues: map[string][]string{"q": {"claim"}}}:    `host: Config.Grants["w"]: queues["q"]: "claim" is not a role here; the roles are consume, submit`,
		{Queues: map[string][]string{"q": {}}}:           `host: Config.Grants["w"]: queues["q"] grants no role; grant one or more of consume, submit, or leave the name out`,
		{Queues: map[string][]string{"a b": {"submit"}}}: `host: Config.Grants["w"]: queues: primitives: invalid argument: queue name "a b" has byte ' '`,
	} {
		r.cfg.Grants = map[string]host.Grant{"w": *g}
		if _, err := host.New(context.Background(), r.cfg); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("host.New(%+v) = %v, want %s", *g, err, want)
		}
	}
}

// TestUnknownTypesWarned: a grant, a configuration or a slot count keyed by a type that no
// loaded plugin has is logged once per load and once per reload, naming the type, the
// loaded types and the nearest of them; a plugin refused for want of its grant names the
// misspelt entry. Reload used to say nothing, and ReloadGrants compared the new grants
// with the plugins loaded before the reload.
func TestUnknownTypesWarned(t *testing.T) {
	r := newRig(t)
	watPlugin(t, r.dir, "done", "scraper", batchDescribe("scraper", "scrape", anyObject))
	r.grant("scrapr", consumer("scrape"))
	r.cfg.PluginsDir = r.dir
	_, err := host.New(context.Background(), r.cfg)
	wantRefusal(t, err, `type "scraper" is not granted what it declares (the grants file has an entry "scrapr": is it this type misspelt?)`)

	r.cfg.Grants = map[string]host.Grant{"scraper": consumer("scrape"), "harvestr": {}}
	r.cfg.SlotsByType = map[string]int{"scraperr": 2}
	h := r.build()
	defer h.Close()
	const line = `msg="host: the grants name type \"harvestr\", which no loaded plugin has" type=harvestr loaded=scraper`
	const slots = `msg="host: the slots by type name type \"scraperr\", which no loaded plugin has; did you mean \"scraper\"?" type=scraperr loaded=scraper`
	count := func(s string) int { return strings.Count(r.logs.String(), s) }
	if count(line) != 1 || count(slots) != 1 {
		t.Fatalf("after New: %d and %d lines, want 1 each of\n%s\n%s", count(line), count(slots), line, slots)
	}
	if err := h.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if count(line) != 2 {
		t.Errorf("after Reload: %d lines, want 2 (one per load or reload)", count(line))
	}
	// A new plugin of the type, loaded by the reload itself: not warned about.
	watPlugin(t, r.dir, "done", "harvester", batchDescribe("harvester", "harvest", anyObject))
	grants := map[string]host.Grant{"scraper": consumer("scrape"), "harvester": consumer("harvest"), "scrapper": {}}
	if err := h.ReloadGrants(context.Background(), grants, nil); err != nil {
		t.Fatal(err)
	}
	const typo = `msg="host: the grants name type \"scrapper\", which no loaded plugin has; did you mean \"scraper\"?" type=scrapper loaded="harvester, scraper"`
	if count(typo) != 1 || count(`type \"harvester\", which no loaded`) != 0 {
		t.Errorf("after ReloadGrants: want one line\n%s\nand none for harvester; log:\n%s", typo, r.logs)
	}
}
