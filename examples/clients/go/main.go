// Command agentbus-go-client is an agentbus client in Go on amqp091-go: nothing but the
// wire contract (docs/wire.md).
//
//	agentbus-go-client request <receiver> <action> [parameters-json]   one request, its reply
//	agentbus-go-client plan <plan.json | ->                            a plan on the leader
//	agentbus-go-client listen <event-name> [count]                     broadcast events
//
// Every envelope received is printed on stdout as one JSON line; notes go to stderr.
// Settings: AGENTBUS_URL (amqp://guest:guest@localhost:5672), AGENTBUS_EXCHANGE (agentbus),
// AGENTBUS_TIMEOUT (seconds a request or plan may take, 30; a plan gets ten times that).
// Exit status: 0 on success, 1 on a failure or error reply, 2 on a usage or transport error.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Envelope is the agentbus message, version 1.0. Payload stays a generic object: its
// fields depend on MessageType (request, response, event, error).
type Envelope struct {
	ProtocolVersion string         `json:"protocol_version"`
	MessageID       string         `json:"message_id"`
	Timestamp       string         `json:"timestamp"`
	SenderID        string         `json:"sender_id"`
	ReceiverID      string         `json:"receiver_id"`
	MessageType     string         `json:"message_type"`
	Payload         map[string]any `json:"payload"`
	Metadata        map[string]any `json:"metadata,omitempty"`

	raw []byte // the bytes received, unknown fields and all
}

var (
	url      = setting("AGENTBUS_URL", "amqp://guest:guest@localhost:5672")
	exchange = setting("AGENTBUS_EXCHANGE", "agentbus")
	timeout  = seconds(setting("AGENTBUS_TIMEOUT", "30"))
	// A client picks its own sender id; one per run keeps the replies and events apart.
	sender = "go-client-" + newID()[:8]
)

func setting(name, fallback string) string {
	if value, ok := os.LookupEnv(name); ok {
		return value
	}
	return fallback
}

func seconds(text string) time.Duration {
	value, err := strconv.ParseFloat(text, 64)
	if err != nil || value <= 0 {
		fmt.Fprintf(os.Stderr, "agentbus-go-client: AGENTBUS_TIMEOUT=%q is no positive number\n", text)
		os.Exit(2)
	}
	return time.Duration(value * float64(time.Second))
}

// newID returns a random (version 4) UUID.
func newID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func newEnvelope(receiver, messageType string, payload map[string]any) Envelope {
	return Envelope{
		ProtocolVersion: "1.0",
		MessageID:       newID(),
		Timestamp:       time.Now().UTC().Format(time.RFC3339Nano),
		SenderID:        sender,
		ReceiverID:      receiver,
		MessageType:     messageType,
		Payload:         payload,
		Metadata:        map[string]any{},
	}
}

// printLine writes an envelope as received, as one JSON line on stdout.
func printLine(envelope Envelope) {
	var line bytes.Buffer
	if err := json.Compact(&line, envelope.raw); err != nil {
		panic(err) // raw is JSON that json.Unmarshal accepted
	}
	fmt.Println(line.String())
}

// decode reads an envelope from the bytes of a delivery, keeping them for printLine.
func decode(body []byte) (Envelope, error) {
	var envelope Envelope
	if err := json.Unmarshal(body, &envelope); err != nil {
		return Envelope{}, fmt.Errorf("not an envelope: %w", err)
	}
	envelope.raw = body
	return envelope, nil
}

// session is a connection, a channel and an exclusive, server-named queue of our own.
type session struct {
	conn  *amqp.Connection
	ch    *amqp.Channel
	queue string
}

func open() (*session, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		var q amqp.Queue
		if q, err = ch.QueueDeclare("", false, true, true, false, nil); err == nil {
			return &session{conn, ch, q.Name}, nil
		}
	}
	conn.Close()
	return nil, err
}

// request sends a request to agent.<receiver>.request and returns its reply envelope.
//
// The reply comes to our own queue (reply_to); it is ours when its correlation id is the
// request's message id. mandatory makes the broker return a request nothing is bound for,
// and expiration dead-letters one nobody picked up in time instead of running it late.
// onEvent, when given, gets the events sent to agent.<our sender id>.event meanwhile
// (plan progress).
func request(receiver, action string, parameters map[string]any, wait time.Duration,
	onEvent func(Envelope)) (Envelope, error) {
	s, err := open()
	if err != nil {
		return Envelope{}, err
	}
	defer s.conn.Close()
	if onEvent != nil {
		if err := s.ch.QueueBind(s.queue, "agent."+sender+".event", exchange, false, nil); err != nil {
			return Envelope{}, err
		}
	}
	deliveries, err := s.ch.Consume(s.queue, "", true, true, false, false, nil)
	if err != nil {
		return Envelope{}, err
	}
	returned := s.ch.NotifyReturn(make(chan amqp.Return, 1))

	sent := newEnvelope(receiver, "request", map[string]any{"action": action, "parameters": parameters})
	body, _ := json.Marshal(sent)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err = s.ch.PublishWithContext(ctx, exchange, "agent."+receiver+".request", true, false, amqp.Publishing{
		ContentType:  "application/json",
		MessageId:    sent.MessageID,
		Type:         "request",
		ReplyTo:      s.queue,
		Expiration:   strconv.FormatInt(wait.Milliseconds(), 10),
		DeliveryMode: amqp.Persistent,
		Body:         body,
	})
	if err != nil {
		return Envelope{}, err
	}
	fmt.Fprintf(os.Stderr, "sent %s on agent.%s.request, replies to %s\n", sent.MessageID, receiver, s.queue)
	for {
		select {
		case r := <-returned:
			return Envelope{}, fmt.Errorf("agent_unavailable: nothing is bound for %s", r.RoutingKey)
		case <-ctx.Done():
			return Envelope{}, fmt.Errorf("no reply within %s", wait)
		case d, ok := <-deliveries:
			if !ok {
				return Envelope{}, errors.New("the broker closed the channel")
			}
			reply, err := decode(d.Body)
			if err != nil {
				return Envelope{}, err
			}
			if reply.MessageType == "event" {
				if onEvent != nil {
					onEvent(reply)
				}
				continue
			}
			correlation := d.CorrelationId
			if correlation == "" {
				correlation, _ = reply.Metadata["correlation_id"].(string)
			}
			if correlation == sent.MessageID {
				return reply, nil
			} // anything else is a stray reply to an earlier request: not ours, ignored
		}
	}
}

// plan submits a plan to the leader, prints its progress events, then the leader's reply.
func plan(file string) (Envelope, error) {
	var text []byte
	var err error
	if file == "-" {
		text, err = io.ReadAll(os.Stdin)
	} else {
		text, err = os.ReadFile(file)
	}
	if err != nil {
		return Envelope{}, err
	}
	var document map[string]any
	if err := json.Unmarshal(text, &document); err != nil {
		return Envelope{}, fmt.Errorf("%s: %w", file, err)
	}
	reply, err := request("leader", "run_plan", map[string]any{"plan": document}, 10*timeout,
		func(event Envelope) {
			if event.Payload["event_name"] == "plan_progress" {
				printLine(event)
			}
		})
	if err == nil {
		printLine(reply)
	}
	return reply, err
}

// listen prints count events named name sent to everyone (broadcast.event.<name>).
func listen(name string, count int) error {
	s, err := open()
	if err != nil {
		return err
	}
	defer s.conn.Close()
	if err := s.ch.QueueBind(s.queue, "broadcast.event."+name, exchange, false, nil); err != nil {
		return err
	}
	deliveries, err := s.ch.Consume(s.queue, "", true, true, false, false, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "listening on %s broadcast.event.%s as %s\n", exchange, name, sender)
	for seen := 0; seen < count; seen++ {
		d, ok := <-deliveries
		if !ok {
			return errors.New("the broker closed the channel")
		}
		event, err := decode(d.Body)
		if err != nil {
			return err
		}
		printLine(event)
	}
	return nil
}

// run runs the command line and returns the exit status.
func run(args []string) (int, error) {
	switch {
	case len(args) >= 3 && args[0] == "request":
		parameters := map[string]any{}
		if len(args) > 3 {
			if err := json.Unmarshal([]byte(args[3]), &parameters); err != nil {
				return 2, fmt.Errorf("parameters: %w", err)
			}
		}
		reply, err := request(args[1], args[2], parameters, timeout, nil)
		if err != nil {
			return 2, err
		}
		printLine(reply)
		if reply.MessageType == "response" && reply.Payload["status"] == "success" {
			return 0, nil
		}
		return 1, nil
	case len(args) == 2 && args[0] == "plan":
		reply, err := plan(args[1])
		if err != nil {
			return 2, err
		}
		if aggregate, ok := reply.Payload["result"].(map[string]any); ok && aggregate["status"] == "completed" {
			return 0, nil
		}
		return 1, nil
	case len(args) >= 2 && args[0] == "listen":
		count := 1
		if len(args) > 2 {
			var err error
			if count, err = strconv.Atoi(args[2]); err != nil {
				return 2, fmt.Errorf("count: %w", err)
			}
		}
		if err := listen(args[1], count); err != nil {
			return 2, err
		}
		return 0, nil
	}
	fmt.Fprintln(os.Stderr, "usage: agentbus-go-client request <receiver> <action> [parameters-json]")
	fmt.Fprintln(os.Stderr, "       agentbus-go-client plan <plan.json | ->")
	fmt.Fprintln(os.Stderr, "       agentbus-go-client listen <event-name> [count]")
	return 2, nil
}

func main() {
	status, err := run(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentbus-go-client: %v\n", err)
	}
	os.Exit(status)
}
