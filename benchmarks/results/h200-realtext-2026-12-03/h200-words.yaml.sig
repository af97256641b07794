{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiI4NjQzZjVlZjAzZGQ4ZmYxN2U4N2NmODIyZDRhYzZhMjU3YzRhMzYyZTBmMmY0MGUwMzJhNTZkYzE3OWI0MWM0In0sIm5hbWUiOiJoMjAwLXdvcmRzLnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "uVCUi/IfQIGtktXmOLv7NmktOg8RIURL97Rh46acWOi5ScoJcSg+QZCIlxx8+tr48kcNW5UdVbcwa2TY1IvLAg==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
