"""What a bridge's upstream client (amqp10/client.py, mqtt/client.py) has to say, taken: the
events it gives the bridge (codec/upstream.py's words), in order, until it has no more."""


def events(client):
    out = []
    while True:
        event = client.next_event()
        if event is None:
            return out
        out.append(event)
