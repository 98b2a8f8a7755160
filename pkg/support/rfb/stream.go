package rfb

// Messages is a byte stream over a stream of messages (a gRPC stream of
// the console's bytes): Read takes the data of received messages in
// order, Write sends one message per call. One reader and one writer may
// use it at once.
type Messages struct {
	// Recv returns the data of the next message.
	Recv func() ([]byte, error)
	// Send sends data as one message (it may keep no reference to it
	// after returning).
	Send func(data []byte) error
	// Pending is data received but not read yet (the first message's).
	Pending []byte
}

func (m *Messages) Read(p []byte) (int, error) {
	for len(m.Pending) == 0 {
		data, err := m.Recv()
		if err != nil {
			return 0, err
		}
		m.Pending = data
	}
	n := copy(p, m.Pending)
	m.Pending = m.Pending[n:]
	return n, nil
}

func (m *Messages) Write(p []byte) (int, error) {
	if err := m.Send(p); err != nil {
		return 0, err
	}
	return len(p), nil
}
