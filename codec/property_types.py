"""What a message property takes, said when it is given a value of another kind (delivery_mode
"2" from a config or JSON): codec/wire.py put_properties raises wrong_type() in place of the
encoder's own words. Loaded only then: a board's heap keeps none of it."""

from .spec import BASIC_PROPERTIES

# what each code of BASIC_PROPERTIES takes, as an error says it
TAKES = {"s": "a string", "t": "a table (a dict)", "o": "an integer from 0 to 255", "T": "an integer (seconds)"}


def wrong_type(name, i, value):
    """TypeError naming the property (as the caller spells it: name) and what it takes."""
    wanted = TAKES.get(BASIC_PROPERTIES[i][1], "another type")
    if BASIC_PROPERTIES[i][0] == "delivery-mode":
        wanted = "1 (transient) or 2 (persistent), an integer"
    return TypeError("message property %s must be %s, not %r" % (name, wanted, value))
