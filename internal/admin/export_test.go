package admin

// The page's bounds, for the tests.
const (
	DivisionsOnPage = divisionsOnPage
	ClientsOnPage   = clientsOnPage
)
