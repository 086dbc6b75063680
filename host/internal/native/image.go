package native

// splitData splits a module into the module without its data segments and the image of
// its memory at instantiation: its active segments laid out over zeroed initial pages,
// cut after the last segment's page. An instance of the stripped module whose memory
// starts as the image is the instance of the module: that is all wazero does with the
// segments. The runtime maps the image copy-on-write into each instance's memory
// (memoryImage), so every page that the guest only reads is one page for all its
// instances.
//
// ok is false, and the module must run as it is, when the image cannot be made ahead of
// instantiation: no memory section; a data count section (memory.init and data.drop
// need one, and name segments by index); a passive segment; an offset that is not an
// i32.const (global.get reads an import); or a segment past the initial memory, which
// wazero refuses at instantiation with its own error.
func splitData(wasm []byte) (stripped, image []byte, ok bool) {
	if len(wasm) < 8 {
		return nil, nil, false
	}
	r := &reader{b: wasm, pos: 8}
	stripped = append([]byte(nil), wasm[:8]...)
	var minBytes uint64
	var segments []struct {
		off  uint64
		data []byte
	}
	hasMemory := false
	for r.pos < len(r.b) {
		start := r.pos
		id := r.byte()
		n := r.u32()
		payload := r.bytes(int(n))
		if r.err != nil {
			return nil, nil, false
		}
		switch id {
		case secMemory:
			p := &reader{b: payload}
			if p.count() != 1 {
				return nil, nil, false
			}
			p.byte()
			minBytes = uint64(p.u32()) * wasmPage
			hasMemory = p.err == nil
		case secDataCount:
			return nil, nil, false
		case secData:
			p := &reader{b: payload}
			count := p.count()
			for i := uint32(0); i < count && p.err == nil; i++ {
				if p.u32() != 0 || p.byte() != 0x41 { // active in memory 0, at an i32.const
					return nil, nil, false
				}
				off := uint64(uint32(p.s64(5)))
				if p.byte() != 0x0b {
					return nil, nil, false
				}
				data := p.bytes(int(p.u32()))
				segments = append(segments, struct {
					off  uint64
					data []byte
				}{off, data})
			}
			if p.done("data section") != nil {
				return nil, nil, false
			}
			continue // dropped from the stripped module
		}
		stripped = append(stripped, wasm[start:r.pos]...)
	}
	if !hasMemory {
		return nil, nil, false
	}
	var end uint64
	for _, s := range segments {
		if s.off+uint64(len(s.data)) > minBytes {
			return nil, nil, false
		}
		end = max(end, s.off+uint64(len(s.data)))
	}
	image = make([]byte, (end+imagePage-1)/imagePage*imagePage)
	for _, s := range segments {
		copy(image[s.off:], s.data)
	}
	return stripped, image, true
}

// imagePage is the granule an image is cut at: the system's page, which a mapping's
// length must be a multiple of.
const imagePage = 4096
