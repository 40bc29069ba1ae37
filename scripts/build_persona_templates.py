"""Grow the starter persona templates' example pairs to ``TARGET`` each (issue #27).

Convergence needs ``min_per_class`` pairs of each human class in the selection split and
the gate as many in the calibration split; with the simulated task model right about 70%
of the time, a template needs a few hundred pairs for the minority class (answers the
human calls incorrect) to reach that in both held-out splits. Writing them by hand is
slow, so the extra pairs are generated here from facts the script computes itself:

factual-qa
    arithmetic, unit conversions, Roman numerals, prime and leap-year questions (computed),
    and capitals and chemical symbols from the short checked tables below.
customer-support
    customer messages about the template's own Lumen & Oak policy; each reply applies the
    policy's rules to the message's figures (days since delivery, order total, price...).
summaries
    short notices (opening hours, road works, releases, incidents, results, events) built
    from drawn facts, with a one- or two-sentence summary of the same facts.

The hand-written pairs come first and are kept as they are. Seeded: running it again gives
the same files. Run from the repository root: ``python scripts/build_persona_templates.py``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "src" / "llmjudge" / "personas" / "templates"
TARGET = 360
# Half the pairs held out (selection and calibration a quarter each): the most the persona
# settings allow, so both held-out splits get enough of each class from TARGET pairs.
HOLDOUT_FRACTION = 0.5

Pair = tuple[str, str]


def _money(x: float) -> str:
    return f"${x:,.2f}"


# -- factual Q&A --------------------------------------------------------------------------

CAPITALS = {
    "France": "Paris",
    "Germany": "Berlin",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Portugal": "Lisbon",
    "Norway": "Oslo",
    "Sweden": "Stockholm",
    "Finland": "Helsinki",
    "Denmark": "Copenhagen",
    "Poland": "Warsaw",
    "Austria": "Vienna",
    "Hungary": "Budapest",
    "Greece": "Athens",
    "Ireland": "Dublin",
    "Egypt": "Cairo",
    "Kenya": "Nairobi",
    "Argentina": "Buenos Aires",
    "Chile": "Santiago",
    "Peru": "Lima",
    "Colombia": "Bogotá",
    "Mexico": "Mexico City",
    "Japan": "Tokyo",
    "South Korea": "Seoul",
    "Thailand": "Bangkok",
    "Indonesia": "Jakarta",
    "New Zealand": "Wellington",
    "Turkey": "Ankara",
    "Brazil": "Brasília",
    "India": "New Delhi",
    "China": "Beijing",
    "Russia": "Moscow",
    "Ukraine": "Kyiv",
    "Czech Republic": "Prague",
    "the Netherlands": "Amsterdam",
    "Belgium": "Brussels",
    "Switzerland": "Bern",
    "Morocco": "Rabat",
    "Nigeria": "Abuja",
    "Vietnam": "Hanoi",
    "Iceland": "Reykjavík",
}

ELEMENTS = {
    "oxygen": "O",
    "carbon": "C",
    "nitrogen": "N",
    "sodium": "Na",
    "potassium": "K",
    "iron": "Fe",
    "silver": "Ag",
    "copper": "Cu",
    "lead": "Pb",
    "tin": "Sn",
    "mercury": "Hg",
    "helium": "He",
    "calcium": "Ca",
    "magnesium": "Mg",
    "chlorine": "Cl",
    "sulfur": "S",
    "zinc": "Zn",
    "neon": "Ne",
    "phosphorus": "P",
    "uranium": "U",
    "tungsten": "W",
    "aluminium": "Al",
    "silicon": "Si",
    "platinum": "Pt",
}

# (question unit, per, answer unit, factor): how many <answer unit> in <n> <question unit>
CONVERSIONS = [
    ("kilometres", "metres", 1000),
    ("metres", "centimetres", 100),
    ("kilograms", "grams", 1000),
    ("hours", "minutes", 60),
    ("minutes", "seconds", 60),
    ("days", "hours", 24),
    ("weeks", "days", 7),
    ("feet", "inches", 12),
    ("litres", "millilitres", 1000),
    ("yards", "feet", 3),
    ("dozen", "items", 12),
]

MONTHS = [
    ("January", 31),
    ("February", 28),
    ("March", 31),
    ("April", 30),
    ("May", 31),
    ("June", 30),
    ("July", 31),
    ("August", 31),
    ("September", 30),
    ("October", 31),
    ("November", 30),
    ("December", 31),
]


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


def _is_leap(y: int) -> bool:
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def _roman(n: int) -> str:
    out = ""
    for value, symbol in [
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ]:
        while n >= value:
            out, n = out + symbol, n - value
    return out


def factual_pairs(rng: random.Random) -> Iterator[Pair]:
    fixed: list[Pair] = [
        (f"What is the capital of {country}?", city) for country, city in CAPITALS.items()
    ]
    fixed += [(f"What is the chemical symbol for {el}?", sym) for el, sym in ELEMENTS.items()]
    fixed += [
        (f"How many days are there in {m} in a year that is not a leap year?", str(d))
        for m, d in MONTHS
    ]
    drawn: list[Callable[[], Pair]] = [
        lambda: (lambda a, b: (f"What is {a} times {b}?", str(a * b)))(
            rng.randint(12, 99), rng.randint(3, 49)
        ),
        lambda: (lambda a, b: (f"What is {a} plus {b}?", str(a + b)))(
            rng.randint(100, 999), rng.randint(100, 999)
        ),
        lambda: (lambda a, b: (f"What is {a} minus {b}?", str(a - b)))(
            rng.randint(500, 999), rng.randint(10, 499)
        ),
        lambda: (lambda p, base: (f"What is {p}% of {base}?", f"{p * base // 100}"))(
            rng.choice([10, 20, 25, 50, 75]), 20 * rng.randint(2, 60)
        ),
        lambda: (lambda c, n: (f"How many {c[1]} are there in {n} {c[0]}?", str(n * c[2])))(
            rng.choice(CONVERSIONS), rng.randint(2, 15)
        ),
        lambda: (lambda n: (f"What number does the Roman numeral {_roman(n)} stand for?", str(n)))(
            rng.randint(11, 2030)
        ),
        lambda: (lambda n: (f"Is {n} a prime number?", "Yes" if _is_prime(n) else "No"))(
            rng.randint(20, 400)
        ),
        lambda: (lambda y: (f"Was {y} a leap year?", "Yes" if _is_leap(y) else "No"))(
            rng.randint(1890, 2024)
        ),
        lambda: (lambda n: (f"What is the square of {n}?", str(n * n)))(rng.randint(13, 60)),
        lambda: (lambda n: (f"What is the square root of {n * n}?", str(n)))(rng.randint(13, 40)),
    ]
    yield from fixed
    while True:
        yield rng.choice(drawn)()


# -- customer support (the Lumen & Oak policy of the template's task prompt) -----------

ITEMS = [
    # (name, category, price)
    ("floor lamp", "lighting", 129.0),
    ("table lamp", "lighting", 64.0),
    ("pendant light", "lighting", 89.0),
    ("oak side table", "furniture", 149.0),
    ("bookshelf", "furniture", 219.0),
    ("armchair", "furniture", 399.0),
    ("dining chair", "furniture", 95.0),
    ("wool rug", "home", 180.0),
    ("set of four mugs", "home", 32.0),
    ("linen duvet cover", "home", 79.0),
    ("throw blanket", "home", 45.0),
    ("ceramic vase", "home", 28.0),
    ("wall mirror", "home", 110.0),
    ("set of cushion covers", "home", 36.0),
    ("bath towel set", "home", 54.0),
]
NAMES = ["Sam", "Priya", "Jordan", "Elena", "Marcus", "Aiko", "Tom", "Fatima", "Lucas", "Grace"]
US_CA = ["Denver", "Toronto", "Austin", "Vancouver", "Boston", "Montreal", "Seattle", "Calgary"]
ABROAD = ["London", "Sydney", "Berlin", "Mexico City", "Dublin", "Tokyo", "Paris", "Auckland"]


_HOW_TO_RETURN = (
    "unused in its original packaging. Go to Account > Orders, choose the order and select "
    "Return item to print a label. As this is a change-of-mind return, the $6.95 return label "
    "fee is deducted from your refund, which goes to your original payment method within 5-7 "
    "business days after the item reaches our warehouse."
)


def _return_pair(rng: random.Random) -> Pair:
    name, _, _ = rng.choice(ITEMS)
    days = rng.randint(2, 50)
    unused = rng.random() < 0.75
    final_sale = rng.random() < 0.15
    state = "still in its box, never used" if unused else "I used it for a couple of weeks"
    sale = " It was in the Final Sale section." if final_sale else ""
    msg = rng.choice(
        [
            f"Hi, the {name} I ordered was delivered {days} days ago and I've changed my mind. "
            f"It's {state}.{sale} Can I send it back?",
            f"Can I return a {name}? It arrived {days} days ago, {state}.{sale} "
            "I just don't like it in the room.",
            f"I'd like a refund for my {name}, delivered {days} days ago. It's {state}.{sale}",
        ]
    )
    if final_sale:
        reply = (
            f"I'm sorry, items marked Final Sale can't be returned, so I can't refund the {name} "
            "for a change of mind. If it's defective or arrived damaged, please tell us. I can "
            "also pass your request to a supervisor, who replies within 1 business day, though "
            "I can't promise an exception."
        )
    elif days > 30:
        reply = (
            f"I'm sorry, returns are accepted within 30 days of delivery and your {name} was "
            f"delivered {days} days ago, so it's outside the return window. If you'd like, I can "
            "escalate your request to a supervisor, who replies within 1 business day, though I "
            "can't promise an exception."
        )
    elif not unused:
        reply = (
            f"I'm sorry, returns are only accepted for unused items in their original packaging, "
            f"so a {name} that has been used can't be returned for a change of mind. If it has a "
            "defect, please let us know. I can also escalate this to a supervisor, who replies "
            "within 1 business day, but I can't promise an exception."
        )
    else:
        reply = (
            f"Yes, you can. Your {name} is within the 30-day return window and " + _HOW_TO_RETURN
        )
    return msg, reply


def _shipping_pair(rng: random.Random) -> Pair:
    total = rng.choice([18, 24, 31, 38, 42, 47, 49, 50, 56, 64, 75, 88, 120])
    abroad = rng.random() < 0.25
    city = rng.choice(ABROAD if abroad else US_CA)
    msg = rng.choice(
        [
            f"How much is shipping to {city} for a ${total} order?",
            f"I'm about to order ${total} worth of things. What would delivery to {city} cost?",
            f"Do you deliver to {city}? My basket comes to ${total}.",
        ]
    )
    if abroad:
        reply = (
            f"I'm sorry, we only ship to the United States and Canada, so we can't deliver to "
            f"{city}. If you have an address in either country, I'd be glad to help you order."
        )
    elif total >= 50:
        reply = (
            f"Yes, we deliver to {city}. As your order is ${total}, standard shipping (3-5 business "
            "days) is free. Express shipping takes 1-2 business days and costs $14.99."
        )
    else:
        reply = (
            f"Yes, we deliver to {city}. As your order is under $50, standard shipping costs $5.99 "
            "and takes 3-5 business days; express takes 1-2 business days for $14.99. Adding "
            f"${50 - total} more to your order would make standard shipping free."
        )
    return msg, reply


def _change_pair(rng: random.Random) -> Pair:
    minutes = rng.choice([5, 10, 15, 25, 35, 45, 55, 70, 90, 120, 180, 300])
    ago = (
        f"{minutes} minutes"
        if minutes < 60
        else f"{minutes // 60} hours"
        if minutes % 60 == 0
        else f"{minutes} minutes"
    )
    want = rng.choice(
        [
            "cancel it",
            "change the delivery address",
            "switch the colour of the rug",
            "remove one of the items",
        ]
    )
    msg = rng.choice(
        [
            f"I placed an order {ago} ago. Can I {want}?",
            f"Hello, I ordered {ago} ago and need to {want}. Is that possible?",
        ]
    )
    if minutes <= 60:
        reply = (
            f"Yes, orders can be changed or cancelled within 1 hour of being placed, and yours was "
            f"placed {ago} ago, so there's still time. You can do it under Account > Orders, or "
            "reply right away with your order number and we'll do it for you."
        )
    else:
        reply = (
            f"I'm sorry, orders can only be changed or cancelled within 1 hour of being placed, and "
            f"yours was placed {ago} ago, so I can't change it now. You can refuse the delivery "
            "when it arrives, or return items within 30 days of delivery under our return policy."
        )
    return msg, reply


def _damage_pair(rng: random.Random) -> Pair:
    name, _, price = rng.choice(ITEMS)
    days = rng.randint(0, 14)
    when = "today" if days == 0 else "yesterday" if days == 1 else f"{days} days ago"
    flaw = rng.choice(
        ["arrived cracked", "arrived with a broken leg", "is the wrong colour", "arrived scratched"]
    )
    if flaw == "arrived with a broken leg" and "chair" not in name and "table" not in name:
        flaw = "arrived broken"
    msg = rng.choice(
        [
            f"My {name} (${price:.0f}) was delivered {when} and it {flaw}. What can you do?",
            f"The {name} I got {when} {flaw}. It cost ${price:.0f}. Help!",
        ]
    )
    if days > 7:
        reply = (
            f"I'm sorry about your {name}. Damaged, defective or wrong items need to be reported "
            f"within 7 days of delivery, and it was delivered {days} days ago, so I can't offer a "
            "replacement or refund under that policy. I can escalate this to a supervisor, who "
            "replies within 1 business day, though I can't promise an exception."
        )
    else:
        back = (
            "As it costs under $40, you don't need to send it back."
            if price < 40
            else "We'll email you a prepaid return label so sending it back costs you nothing."
        )
        reply = (
            f"I'm sorry your {name} {flaw}. Please reply with a photo; you're within the 7 days "
            f"for reporting it. You can then choose a free replacement or a full refund. {back}"
        )
    return msg, reply


def _price_pair(rng: random.Random) -> Pair:
    name, _, price = rng.choice(ITEMS)
    days = rng.randint(2, 25)
    drop = rng.choice([5, 10, 12, 15, 20, 25])
    clearance = rng.random() < 0.2
    tag = " It was a clearance item." if clearance else ""
    msg = (
        f"I bought a {name} for ${price:.0f} {days} days ago and now your site lists it at "
        f"${price - drop:.0f}.{tag} Can I get the difference back?"
    )
    if clearance:
        reply = (
            "I'm sorry, price adjustments don't apply to clearance items, so I can't refund the "
            f"difference on your {name}. I can pass your request to a supervisor, who replies "
            "within 1 business day, though I can't promise an exception."
        )
    elif days <= 14:
        reply = (
            f"Yes. Our price dropped within 14 days of your purchase, so we'll refund the ${drop} "
            f"difference on your {name} to your original payment method. A price adjustment can "
            "be made once per item."
        )
    else:
        reply = (
            f"I'm sorry, price adjustments apply only when our price drops within 14 days of "
            f"purchase, and you bought the {name} {days} days ago, so I can't refund the ${drop} "
            "difference. I can escalate your request to a supervisor if you'd like."
        )
    return msg, reply


def _warranty_pair(rng: random.Random) -> Pair:
    name, _, _ = rng.choice([i for i in ITEMS if i[1] in ("furniture", "lighting")])
    # never exactly 12: "a year ago" is on the warranty's edge, and a reply must be decidable
    months = rng.choice([m for m in range(2, 21) if m != 12])
    defect = rng.random() < 0.65
    cause = (
        rng.choice(
            [
                "the switch stopped working",
                "a joint came loose on its own",
                "the finish started peeling",
            ]
        )
        if defect
        else rng.choice(
            ["my dog chewed one corner", "I knocked it over while moving", "my son stood on it"]
        )
    )
    msg = f"My {name} was delivered {months} months ago and {cause}. Is that covered?"
    if not defect:
        reply = (
            f"I'm sorry to hear about your {name}. Our 1-year warranty covers manufacturing "
            "defects, not accidents, misuse or normal wear, so this isn't covered. I can escalate "
            "to a supervisor, who replies within 1 business day, though I can't promise an "
            "exception."
        )
    elif months <= 12:
        reply = (
            f"Yes, that sounds like a manufacturing defect, and your {name} is within its 1-year "
            "warranty from delivery, so it's covered. Please reply with a photo and your order "
            "number and we'll arrange a repair or replacement."
        )
    else:
        reply = (
            f"I'm sorry, our furniture and lighting warranty lasts 1 year from delivery, and your "
            f"{name} was delivered {months} months ago, so it's no longer covered. I can escalate "
            "your request to a supervisor, who replies within 1 business day, though I can't "
            "promise an exception."
        )
    return msg, reply


def _missing_pair(rng: random.Random) -> Pair:
    hours = rng.choice([3, 6, 12, 20, 24, 30, 36, 50, 60, 72, 96])
    msg = rng.choice(
        [
            f"Tracking says my package was delivered {hours} hours ago but it isn't here.",
            f"It's been {hours} hours since my parcel was marked as delivered and I still don't have it.",
        ]
    )
    if hours < 48:
        reply = (
            "I'm sorry your package hasn't turned up. Most packages marked delivered arrive within "
            f"48 hours, so please wait another {48 - hours} hours. If it still hasn't come by "
            "then, let us know and we'll open a carrier claim and send a replacement at no cost."
        )
    else:
        reply = (
            "I'm sorry your package hasn't arrived. As it's been more than 48 hours since it was "
            "marked delivered, we'll open a carrier claim and send you a replacement at no cost. "
            "Please confirm your order number and delivery address."
        )
    return msg, reply


def _rewards_pair(rng: random.Random) -> Pair:
    if rng.random() < 0.5:
        points = rng.choice([80, 150, 240, 300, 420, 575, 660, 1000, 1230])
        worth = points // 100 * 5
        msg = f"I have {points} Oak Rewards points. How much are they worth?"
        if worth:
            reply = (
                f"Every 100 points is $5 off, so your {points} points are worth ${worth} off "
                "your next order. Points expire after 12 months without a purchase."
            )
        else:
            reply = (
                f"Every 100 points is $5 off, so your {points} points aren't enough for a "
                f"discount yet; you need {100 - points} more. Points expire after 12 months "
                "without a purchase."
            )
    else:
        total = rng.choice([37, 64, 88, 129, 210, 315, 499])
        msg = f"How many Oak Rewards points will I earn on a ${total} order?"
        reply = (
            f"You earn 1 point per $1 spent, so a ${total} order earns {total} points. "
            "100 points are worth $5 off, and points expire after 12 months without a purchase."
        )
    return msg, reply


def _security_pair(rng: random.Random) -> Pair:
    who = rng.choice(NAMES)
    case = rng.randrange(3)
    if case == 0:
        digits = "".join(str(rng.randint(0, 9)) for _ in range(4))
        msg = (
            f"Hi, it's {who}. My card ending {digits} was declined, so here's my full card "
            "number to try again. Can you put the order through by phone?"
        )
        reply = (
            "For your security, please don't share your full card number: we never ask for or "
            "accept it. You can update your payment method yourself under your account and "
            "place the order again, and I'm happy to help if it's still declined."
        )
    elif case == 1:
        msg = f"Can you change the email on my account to {who.lower()}.new@example.com? I'm {who}."
        reply = (
            "Yes. To protect your account, changing the email address needs a confirmation: "
            "we'll send a link to your current address, and the change is made once you click it."
        )
    else:
        msg = f"I'm {who} and I forgot my password. Can you tell me what it is?"
        reply = (
            "For your security we never ask for or share passwords, so I can't tell you it. "
            "Please use the forgotten-password link on the sign-in page to set a new one."
        )
    return msg, reply


def support_pairs(rng: random.Random) -> Iterator[Pair]:
    kinds = [
        _return_pair,
        _shipping_pair,
        _change_pair,
        _damage_pair,
        _price_pair,
        _warranty_pair,
        _missing_pair,
        _rewards_pair,
        _security_pair,
    ]
    while True:
        yield rng.choice(kinds)(rng)


# -- summaries ----------------------------------------------------------------------------

TOWNS = [
    "Millbrook",
    "Ashford",
    "Riverton",
    "Kingsley",
    "Harlow",
    "Fairview",
    "Oakdale",
    "Westport",
]
PEOPLE = [
    "Ana Ruiz",
    "David Okafor",
    "Mei Chen",
    "Tom Becker",
    "Sara Lindqvist",
    "Raj Patel",
    "Lucia Moretti",
    "James Hale",
]
DAYS = ["March 4", "April 15", "May 2", "June 10", "September 1", "October 7", "November 3"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]


def _hours_pair(rng: random.Random) -> Pair:
    town, who, day = rng.choice(TOWNS), rng.choice(PEOPLE), rng.choice(DAYS)
    place = rng.choice(["public library", "swimming pool", "community centre", "town museum"])
    close_old, close_new = rng.choice([(6, 8), (7, 9), (5, 7), (6, 9)])
    share = rng.randint(51, 78)
    fund = rng.choice(
        ["a two-year county grant", "a local business sponsorship", "the town's reserve fund"]
    )
    text = (
        f"The {town} {place} will stay open later on weekdays from {day}. It will close at "
        f"{close_new} p.m. instead of {close_old} p.m., Monday through Friday; weekend hours do "
        f"not change. Manager {who} said the change follows a survey in which {share}% of "
        f"visitors asked for evening opening. The extra hours are paid for by {fund}."
    )
    summary = (
        f"From {day}, the {town} {place} will close at {close_new} p.m. instead of {close_old} "
        f"p.m. on weekdays, after {share}% of surveyed visitors asked for evening opening; "
        f"{fund} pays for it."
    )
    return text, summary


def _roadworks_pair(rng: random.Random) -> Pair:
    town = rng.choice(TOWNS)
    road = rng.choice(["High Street", "Mill Road", "Station Avenue", "Church Lane", "Bridge Road"])
    weeks = rng.randint(2, 9)
    day = rng.choice(DAYS)
    why = rng.choice(["to replace a water main", "for resurfacing", "to repair a collapsed drain"])
    detour = rng.choice(["Park Road", "the ring road", "Elm Street", "Queen's Way"])
    cost = rng.choice([180_000, 240_000, 420_000, 1_200_000])
    text = (
        f"{road} in {town} will be closed to traffic for {weeks} weeks from {day} {why}. "
        f"Buses and cars will be diverted along {detour}, and pedestrian access to shops will "
        f"be kept throughout. The council said the work costs ${cost:,} and was brought "
        "forward after repeated complaints from residents."
    )
    summary = (
        f"{road} in {town} closes to traffic for {weeks} weeks from {day} {why}, with traffic "
        f"diverted along {detour} and shops still reachable on foot; the work costs ${cost:,}."
    )
    return text, summary


def _release_pair(rng: random.Random) -> Pair:
    app = rng.choice(["Tally", "Notely", "PlanIt", "Ledgerly", "Snapform", "Trackwise"])
    major, minor = rng.randint(2, 7), rng.randint(0, 9)
    feature = rng.choice(
        ["dark mode", "offline editing", "shared folders", "two-factor sign-in", "calendar sync"]
    )
    bug = rng.choice(
        [
            "a crash when opening large files",
            "duplicate notifications",
            "exports that cut off the last page",
            "slow start-up on older phones",
        ]
    )
    dropped = rng.choice(
        ["Windows 7", "the legacy CSV importer", "the old web widget", "Android 8"]
    )
    free = rng.random() < 0.6
    price = "free for all existing users" if free else "included in paid plans only"
    text = (
        f"Version {major}.{minor} of {app} adds {feature}, one of the most requested features. "
        f"It also fixes {bug}. Support for {dropped}, announced as deprecated last year, has "
        f"been removed. The update is {price}."
    )
    summary = (
        f"{app} {major}.{minor}, {price}, adds {feature}, fixes {bug} and removes support "
        f"for {dropped}."
    )
    return text, summary


def _incident_pair(rng: random.Random) -> Pair:
    day = rng.choice(WEEKDAYS)
    start_h, start_m = rng.randint(8, 20), rng.choice([5, 10, 20, 35, 40])
    minutes = rng.randint(12, 95)
    end_total = start_h * 60 + start_m + minutes
    share = rng.randint(5, 40)
    what = rng.choice(["checkout requests", "log-ins", "search queries", "file uploads"])
    cause = rng.choice(
        [
            ("an expired TLS certificate on an internal service", "renewed the certificate"),
            (
                "a configuration change that halved the database connection pool",
                "reverted the change",
            ),
            ("a full disk on the cache servers", "freed disk space and added capacity"),
        ]
    )
    text = (
        f"On {day} between {start_h:02d}:{start_m:02d} and {end_total // 60:02d}:"
        f"{end_total % 60:02d} UTC, about {share}% of {what} failed. The cause was {cause[0]}. "
        f"Engineers {cause[1]}, after which error rates returned to normal. No data was lost. "
        "The team will add an alert so the problem is caught before users notice it."
    )
    summary = (
        f"For {minutes} minutes on {day} about {share}% of {what} failed because of {cause[0]}; "
        f"engineers {cause[1]}, no data was lost, and an alert will be added."
    )
    return text, summary


def _results_pair(rng: random.Random) -> Pair:
    firm = rng.choice(["Northwind Foods", "Brightline Rail", "Corvex Software", "Halden Outdoor"])
    quarter = rng.choice(["first", "second", "third", "fourth"])
    revenue = rng.randint(40, 900)
    change = rng.randint(2, 24)
    up = rng.random() < 0.6
    reason = rng.choice(
        [
            "strong online sales",
            "higher fuel costs",
            "a new product line",
            "weaker demand in Europe",
        ]
    )
    direction = "rose" if up else "fell"
    text = (
        f"{firm} said revenue in the {quarter} quarter {direction} {change}% to ${revenue} "
        f"million, which it attributed to {reason}. The company kept its forecast for the full "
        f"year unchanged. Chief executive {rng.choice(PEOPLE)} said hiring would continue as planned."
    )
    summary = (
        f"{firm}'s {quarter}-quarter revenue {direction} {change}% to ${revenue} million, "
        f"which it put down to {reason}; its full-year forecast is unchanged."
    )
    return text, summary


def _event_pair(rng: random.Random) -> Pair:
    town = rng.choice(TOWNS)
    event = rng.choice(
        ["food festival", "book fair", "jazz weekend", "farmers' market", "open-air cinema"]
    )
    day = rng.choice(DAYS)
    place = rng.choice(
        ["Riverside Park", "the Market Square", "the old railway yard", "Castle Green"]
    )
    visitors = rng.choice([2_000, 3_500, 5_000, 8_000, 12_000])
    ticket = rng.choice([0, 5, 8, 12])
    price = (
        "Entry is free."
        if ticket == 0
        else f"Tickets cost ${ticket}, and children under 12 go free."
    )
    text = (
        f"{town}'s {event} returns on {day} at {place}, organisers said. They expect about "
        f"{visitors:,} visitors, up from last year, and have added extra parking and shuttle "
        f"buses from the station. {price}"
    )
    fee = "free entry" if ticket == 0 else f"${ticket} tickets (under-12s free)"
    summary = (
        f"{town}'s {event} returns on {day} at {place}, with about {visitors:,} visitors "
        f"expected, extra parking and shuttle buses, and {fee}."
    )
    return text, summary


def summary_pairs(rng: random.Random) -> Iterator[Pair]:
    kinds = [
        _hours_pair,
        _roadworks_pair,
        _release_pair,
        _incident_pair,
        _results_pair,
        _event_pair,
    ]
    while True:
        yield rng.choice(kinds)(rng)


GENERATORS: dict[str, Callable[[random.Random], Iterator[Pair]]] = {
    "factual-qa": factual_pairs,
    "customer-support": support_pairs,
    "summaries": summary_pairs,
}


def _key(text: str) -> str:
    return " ".join(text.casefold().split())


def grow(key: str, target: int = TARGET) -> None:
    path = FOLDER / f"{key}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    pairs = [p for p in data["pairs"] if not p.get("generated")]
    seen = {_key(p["input"]) for p in pairs}
    source = GENERATORS[key](random.Random(f"templates:{key}"))
    for question, answer in source:
        if len(pairs) >= target:
            break
        if _key(question) in seen:
            continue
        seen.add(_key(question))
        pairs.append({"input": question, "correct_output": answer, "generated": True})
    data["pairs"] = pairs
    data["holdout_fraction"] = HOLDOUT_FRACTION
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    for name in GENERATORS:
        grow(name)
