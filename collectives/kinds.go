package collectives

// NumCollectives is the number of Collective kinds: tables indexed by a
// Collective (comm's forced algorithms) are sized by it, so a new kind
// grows them at compile time.
const NumCollectives = int(numCollectives)
